#!/usr/bin/env bash
# tests/e2e_newuser.sh - what a new user hit, the second time (issue 56), one check
# each: `make test` builds no CUDA where no GPU can run it (make check-cuda does, for
# CI), `-f -` and unopenable files, -q everywhere, the top-level --help and `minfer
# paths`, load errors that name the path once, --seed -1, failed writes of the text,
# chat's context that drops the oldest turns and its line editing at a terminal, the
# README's order. (The server's items: tests/server/test_newuser.py, tests/webui_test.py.)
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/minfer
SHARED=${MINFER_SHARED:-../shared}
STORIES=$SHARED/models/stories260K.gguf
TMP=$(mktemp -d)
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT
P=0; F=0; S=0
ok() { P=$((P + 1)); }
fail() { F=$((F + 1)); echo "FAIL: $*" >&2; }
skip() { S=$((S + 1)); echo "SKIP: $*" >&2; }
check() { local what=$1; shift; if "$@"; then ok; else fail "$what"; fi; }
gpu_usable() { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

# 1. make test with nvcc but no GPU builds the CPU binary of `make run` (build/cpu) and
# compiles no .cu file; make check-cuda compiles every .cu for the three architectures.
# A stand-in nvcc makes the Makefile choose CUDA; make -n only prints (the sub-make of
# the CPU build is run with -n too). The outer make's MAKEFLAGS (CUDA=0 ...) are dropped.
mkdir -p "$TMP/bin"
printf '#!/bin/sh\nexit 0\n' >"$TMP/bin/nvcc"
chmod +x "$TMP/bin/nvcc"
mk() { env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u CUDA -u SAN -u SAN_TOP make --no-print-directory -n NVCC="$TMP/bin/nvcc" BUILD="$TMP/b" "$@" 2>&1; }
n_cu=$(ls src/cuda/*.cu | wc -l)
if gpu_usable; then
    skip "make test's CPU build without a GPU: this machine has one"
else
    mk test >"$TMP/plan"
    check "make test, nvcc but no GPU: no nvcc compile ($(grep -c "$TMP/bin/nvcc .*\.cu" "$TMP/plan"))" \
        bash -c "! grep -q '$TMP/bin/nvcc .*\.cu' '$TMP/plan'"
    check "make test, nvcc but no GPU: links $TMP/b/cpu/minfer" grep -q -- "-o $TMP/b/cpu/minfer " "$TMP/plan"
    check "make test, nvcc but no GPU: runs the suite on $TMP/b/cpu" grep -q "BUILD=$TMP/b/cpu .*tests/run.sh" "$TMP/plan"
    check "make test, nvcc but no GPU: says so" grep -q "no usable GPU: make test builds without CUDA" "$TMP/plan"
fi
mk test CUDA=1 >"$TMP/plan1"
check "make test CUDA=1 compiles the CUDA code" grep -q "$TMP/bin/nvcc .*src/cuda/.*\.cu" "$TMP/plan1"
mk check-cuda >"$TMP/plan2"
for a in sm_80 sm_90a sm_120; do
    k=$(grep "$TMP/bin/nvcc .*src/cuda/.*\.cu" "$TMP/plan2" | grep -c "code=$a")
    check "make check-cuda compiles all $n_cu .cu files for $a ($k)" [ "$k" -eq "$n_cu" ]
done
check "make check-cuda links minfer with the CUDA objects" grep -q -- "-o $TMP/b/minfer .*cudart" "$TMP/plan2"
check ".ci/run calls make check-cuda" grep -q '^ *make -j2 check-cuda' .ci/run

# expect_err CODE DESCRIPTION PATTERN command...: exit CODE, one stderr line matching PATTERN
expect_err() {
    local want=$1 what=$2 pat=$3; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    if [ "$rc" -ne "$want" ]; then fail "$what: exit $rc, want $want ($(head -c 300 "$TMP/err"))"; return; fi
    if [ "$(wc -l <"$TMP/err")" -ne 1 ]; then fail "$what: want one line on stderr: $(head -c 600 "$TMP/err")"; return; fi
    if ! grep -Eq -- "$pat" "$TMP/err"; then fail "$what: stderr does not match '$pat': $(cat "$TMP/err")"; return; fi
    ok
}
[ -f "$STORIES" ] || { echo "RESULT e2e_newuser passed=$P failed=$F skipped=$((S + 1))"; echo "SKIP: no $STORIES" >&2; exit 0; }

# 3. -f - reads the prompt from standard input (run, perplexity); a file that cannot be
# opened says why.
printf 'Once upon a time' >"$TMP/prompt.txt"
"$BIN" run -m "$STORIES" -f "$TMP/prompt.txt" -n 12 --temp 0 -q >"$TMP/want" 2>/dev/null
"$BIN" run -m "$STORIES" -f - -n 12 --temp 0 -q <"$TMP/prompt.txt" >"$TMP/got" 2>"$TMP/err"; rc=$?
check "run -f - reads stdin: exit $rc, the same text as -f FILE" bash -c "[ $rc -eq 0 ] && [ -s '$TMP/want' ] && cmp -s '$TMP/want' '$TMP/got'"
"$BIN" perplexity -m "$STORIES" -f - --ctx 32 -q <"$TMP/prompt.txt" >"$TMP/ppl" 2>"$TMP/err"
grep -q "cannot open -" "$TMP/err" && fail "perplexity -f -: $(cat "$TMP/err")" || ok
expect_err 2 "run -f with a missing file says why" "cannot open $TMP/nofile: No such file or directory" \
    "$BIN" run -m "$STORIES" -f "$TMP/nofile"
expect_err 2 "run -f with a directory says why" "(error reading|cannot open) $TMP: Is a directory" "$BIN" run -m "$STORIES" -f "$TMP"

# 6. A model that fails to load names its path once.
head -c 3000 "$STORIES" >"$TMP/trunc.gguf"
for cmd in run info tokenize serve; do
    expect_err 2 "$cmd: truncated model, one message" "error: .*trunc\.gguf" "$BIN" $cmd -m "$TMP/trunc.gguf" </dev/null
    k=$(grep -o "trunc\.gguf" "$TMP/err" | wc -l)
    check "$cmd: the load error names the path once, not $k times: $(cat "$TMP/err")" [ "$k" -eq 1 ]
done
expect_err 2 "a missing model: the path once, with the reason" "cannot open $TMP/none.gguf: No such file" \
    "$BIN" run -m "$TMP/none.gguf"
check "a missing model: the path once" [ "$(grep -o 'none\.gguf' "$TMP/err" | wc -l)" -eq 1 ]

# 4. -q for bench, tokenize and info (nothing on stderr); chat -q prints no help lines,
# also at a terminal (tests/tools/pty_run.py types into a pseudo-terminal).
echo "Once upon a time" | "$BIN" tokenize -m "$STORIES" -q >"$TMP/out" 2>"$TMP/err"; rc=$?
check "tokenize -q: exit $rc, ids, quiet ($(head -c 200 "$TMP/err"))" bash -c "[ $rc -eq 0 ] && [ -s '$TMP/out' ] && [ ! -s '$TMP/err' ]"
"$BIN" info -m "$STORIES" -q >"$TMP/out" 2>"$TMP/err"; rc=$?
check "info -q: exit $rc, the description, quiet" bash -c "[ $rc -eq 0 ] && grep -q '^model: ' '$TMP/out' && [ ! -s '$TMP/err' ]"
"$BIN" bench -m "$STORIES" -p 8 -n 4 -r 1 -q >"$TMP/out" 2>"$TMP/err"; rc=$?
check "bench -q: exit $rc, the table, quiet ($(head -c 200 "$TMP/err"))" \
    bash -c "[ $rc -eq 0 ] && grep -q 'tg4' '$TMP/out' && [ ! -s '$TMP/err' ]"
"$BIN" bench -m "$STORIES" -p 8 -n 4 -r 1 >/dev/null 2>"$TMP/err"
check "bench without -q still reports on stderr" grep -q 'bench: ' "$TMP/err"
printf 'hello\n' | "$BIN" chat -m "$STORIES" -q -n 4 --temp 0 >"$TMP/out" 2>"$TMP/err"; rc=$?
check "chat -q, piped: exit $rc, an answer, quiet ($(head -c 200 "$TMP/err"))" \
    bash -c "[ $rc -eq 0 ] && [ -s '$TMP/out' ] && [ ! -s '$TMP/err' ]"
PY=${PYTHON:-python3}
"$PY" tests/tools/pty_run.py --delay 1 'hello\n/exit\n' -- "$BIN" chat -m "$STORIES" -q -n 4 --temp 0 >"$TMP/tty" 2>&1; rc=$?
check "chat -q at a terminal: exit $rc, no help lines: $(head -c 300 "$TMP/tty")" \
    bash -c "[ $rc -eq 0 ] && grep -q '> hello' '$TMP/tty' && ! grep -q 'minfer: chat: type a message' '$TMP/tty'"
"$PY" tests/tools/pty_run.py --delay 1 '/exit\n' -- "$BIN" chat -m "$STORIES" -n 4 >"$TMP/tty" 2>&1
check "chat without -q at a terminal: the help lines" grep -q 'minfer: chat: type a message' "$TMP/tty"

# 5. The top-level --help lists the commands and points to COMMAND --help; the tables of
# optional paths are `minfer paths` (both backends, in every build).
"$BIN" --help >"$TMP/help" 2>&1; rc=$?
check "minfer --help: exit $rc" [ "$rc" -eq 0 ]
check "minfer --help: at most 25 lines ($(wc -l <"$TMP/help"))" [ "$(wc -l <"$TMP/help")" -le 25 ]
check "minfer --help: points to COMMAND --help" grep -q 'minfer COMMAND --help' "$TMP/help"
for c in run chat tokenize bench synth info serve perplexity paths; do
    check "minfer --help lists $c" grep -Eq "^  $c " "$TMP/help"
done
check "minfer --help: no table of paths" bash -c "! grep -q 'optional paths (' '$TMP/help'"
"$BIN" paths >"$TMP/paths" 2>&1; rc=$?
check "minfer paths: exit $rc, both tables" bash -c "[ $rc -eq 0 ] && grep -q 'optional paths (MINFER_CPU_DISABLE' '$TMP/paths' &&
    grep -q 'optional paths (MINFER_CUDA_DISABLE' '$TMP/paths' && grep -Eq '^  avx2 ' '$TMP/paths' && grep -Eq '^  graph ' '$TMP/paths'"
"$BIN" paths --help >"$TMP/ph" 2>&1
check "minfer paths --help says what they are for" grep -q 'notice' "$TMP/ph"

# 7. chat: when the conversation outgrows the context the oldest turns are dropped (the
# system message kept) with a notice, and every turn is answered; a message that alone
# does not fit is an error and the chat goes on. At a terminal, libedit edits the line
# and recalls the history; Ctrl-C clears the line, twice quits.
SYS="You are a storyteller who tells short stories to children."
n_sys=$(printf '%s' "$SYS" | "$BIN" tokenize -m "$STORIES" --no-bos -q | wc -w)
printf 'Tell me a story.\nAnother one.\nAnd one more.\nOnce more.\nAgain.\nLast one.\n' |
    "$BIN" chat -m "$STORIES" --ctx 256 -n 24 --temp 0 --system "$SYS" >"$TMP/out" 2>"$TMP/err"; rc=$?
check "chat past the context: exit $rc, no error ($(grep error "$TMP/err" | head -2))" \
    bash -c "[ $rc -eq 0 ] && ! grep -q error '$TMP/err'"
check "chat past the context: the 6 turns answered ($(grep -c 'turn [0-9]*: prefilled' "$TMP/err"))" \
    [ "$(grep -c 'turn [0-9]*: prefilled' "$TMP/err")" -eq 6 ]
check "chat past the context: a notice of the dropped turns" \
    grep -q 'outgrew the context of 256 tokens: dropped the oldest 1 turn (2 messages); the system message is kept' "$TMP/err"
# after a drop the cache still holds the system message: the next turn reuses its tokens
after=$(grep -A1 'dropped the oldest' "$TMP/err" | sed -n 's/.*turn [0-9]*: prefilled [0-9]* new tokens, \([0-9]*\) reused.*/\1/p' | head -n 1)
check "chat past the context: the system message kept (${after:-no} tokens reused, it has $n_sys)" \
    bash -c "[ -n '$after' ] && [ '$after' -ge '$n_sys' ]"
{ printf 'x%.0s' $(seq 400); printf '\nhello\n'; } | "$BIN" chat -m "$STORIES" --ctx 256 -n 8 --temp 0 >"$TMP/out" 2>"$TMP/err"; rc=$?
check "chat: a message longer than the context: said, and the next one answered (exit $rc)" \
    bash -c "[ $rc -eq 0 ] && grep -q 'error: chat: the message (4[0-9][0-9] tokens with the template) does not fit the context of 256 tokens' '$TMP/err' &&
        grep -q 'turn 1: prefilled' '$TMP/err'"
# the same two messages piped, and at a terminal typed with edits and recalled (up
# arrow): the same turns, token for token (greedy, the same cache). The edits: "héllo",
# three times left, backspace erases the é (two bytes, one character; with no locale set
# too), "e". The second line inserts a letter after the left arrow.
printf 'hello\nhello\n' | "$BIN" chat -m "$STORIES" -n 8 --temp 0 >/dev/null 2>"$TMP/err"
want=$(grep 'turn [0-9]*: prefilled' "$TMP/err")
env -u LANG -u LC_ALL -u LC_CTYPE "$PY" tests/tools/pty_run.py --delay 1 \
    'h\xc3\xa9llo\x1b[D\x1b[D\x1b[D\x7fe\nhelo\x1b[Dl\n/exit\n' -- "$BIN" chat -m "$STORIES" -n 8 --temp 0 >"$TMP/tty" 2>&1; rc=$?
got=$(tr -d '\r' <"$TMP/tty" | grep -a 'turn [0-9]*: prefilled')
check "chat at a terminal: edited lines are sent as shown (exit $rc; got '$got', want '$want')" \
    bash -c "[ $rc -eq 0 ] && [ -n '$want' ] && [ '$got' = '$want' ]"
"$PY" tests/tools/pty_run.py --delay 1 'hello\n\x1b[A\n/exit\n' -- "$BIN" chat -m "$STORIES" -n 8 --temp 0 >"$TMP/tty" 2>&1; rc=$?
got=$(tr -d '\r' <"$TMP/tty" | grep -a 'turn [0-9]*: prefilled')
check "chat at a terminal: up arrow recalls the line before (exit $rc; got '$got', want '$want')" \
    bash -c "[ $rc -eq 0 ] && [ -n '$want' ] && [ '$got' = '$want' ]"
check "chat at a terminal: no escape sequence reaches the model: $(grep -a -o '.^\[\[[A-D].' "$TMP/tty" | head -n 1)" \
    bash -c "! grep -a -q '\^\[\[' '$TMP/tty'"
"$PY" tests/tools/pty_run.py --delay 1 --timeout 30 'abc\x03hello\n\x03\x03' -- "$BIN" chat -m "$STORIES" -n 8 --temp 0 >"$TMP/tty" 2>&1; rc=$?
got=$(tr -d '\r' <"$TMP/tty" | grep -a 'turn [0-9]*: prefilled')
check "chat at a terminal: Ctrl-C drops the line typed so far, twice quits (exit $rc; got '$got')" \
    bash -c "[ $rc -eq 0 ] && grep -a -q 'Ctrl-C again (or /exit) to quit' '$TMP/tty' && [ '$got' = '$(head -n 1 <<<"$want")' ]"

# 8. --seed -1 is a random seed (llama.cpp's spelling): two runs draw different seeds;
# other negative seeds are still usage errors.
for i in 1 2; do
    "$BIN" run -m "$STORIES" -p "" -n 4 --temp 1 --seed -1 >/dev/null 2>"$TMP/seed$i"; rc=$?
    check "run --seed -1: exit $rc ($(head -c 200 "$TMP/seed$i"))" [ "$rc" -eq 0 ]
done
s1=$(sed -n 's/.*seed \([0-9]*\) (--seed to repeat).*/\1/p' "$TMP/seed1")
s2=$(sed -n 's/.*seed \([0-9]*\) (--seed to repeat).*/\1/p' "$TMP/seed2")
check "--seed -1: a seed drawn each run ($s1, $s2)" bash -c "[ -n '$s1' ] && [ -n '$s2' ] && [ '$s1' != '$s2' ]"
echo hi | "$BIN" chat -m "$STORIES" -n 4 --temp 1 --seed -1 -q >/dev/null 2>"$TMP/err"
check "chat --seed -1: accepted ($(head -c 200 "$TMP/err"))" bash -c "[ ! -s '$TMP/err' ]"
expect_err 1 "--seed -2: a usage error" "option --seed: '-2' is not a non-negative integer \(or -1" "$BIN" run -m "$STORIES" --seed -2

# 10. Generated text that cannot be written (a full disk, a closed pipe) is an error:
# exit 2 and the reason, not exit 0 in silence; so is any command's stdout.
expect_err 2 "run > /dev/full" "error: writing the generated text to standard output: No space left on device" \
    bash -c '"$0" run -m "$1" -p "Once upon a time" -n 200 --temp 0 -q >/dev/full' "$BIN" "$STORIES"
expect_err 2 "chat > /dev/full" "error: writing the generated text to standard output: No space left on device" \
    bash -c 'echo hello | "$0" chat -m "$1" -n 20 -q >/dev/full' "$BIN" "$STORIES"
expect_err 2 "info > /dev/full" "error: info: writing standard output: No space left on device" \
    bash -c '"$0" info -m "$1" -q >/dev/full' "$BIN" "$STORIES"
# a pipe whose reader is gone, SIGPIPE ignored (as under nohup or some supervisors):
# write fails with EPIPE. (With SIGPIPE at its default the signal ends the process.)
closed_pipe() {
    "$PY" -c 'import os, signal, subprocess, sys
r, w = os.pipe(); os.close(r)
sys.exit(subprocess.run(sys.argv[1:], stdout=w, preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN)).returncode)' "$@"
}
expect_err 2 "run into a closed pipe" "error: writing the generated text to standard output: Broken pipe" \
    closed_pipe "$BIN" run -m "$STORIES" -p "Once upon a time" -n 200 --temp 0 -q

# 11. The README in a newcomer's order: what minfer is, the two commands, chatting, the
# models of get-model, the server (an openai client, curl, the request fields), a short
# table of performance, then the kernel design and the full figures, then the reference.
# (tests/server/test_newuser.py runs its server snippets.)
order=("## Set-up: two commands" "## Chatting with a model" "## Models: \`make get-model\`" "## The server"
       "from openai import OpenAI" "curl http://127.0.0.1:8080/v1/chat/completions" "Request fields"
       "## Performance" "## Kernel design and full figures" "### Where it stands" "### Environment switches"
       "## Reference")
last=0
for h in "${order[@]}"; do
    n=$(grep -n -F -- "$h" README.md | head -n 1 | cut -d: -f1)
    check "README: '$h' after the part before (line ${n:-none}, after $last)" bash -c "[ -n '$n' ] && [ '$n' -gt '$last' ]"
    last=${n:-$last}
done
check "README: what minfer is, before the commands" bash -c "sed -n '1,/^## /p' README.md | grep -q 'runs large language models'"

echo "RESULT e2e_newuser passed=$P failed=$F skipped=$S"
[ "$F" -eq 0 ]
