#!/usr/bin/env bash
# tests/e2e_bench.sh - `minfer bench` end to end on a tiny synthetic model (CPU):
# -s N (N sequences decoded together): test names, n_seq, the aggregate and
# per-sequence rates, prefill per sequence; --ctx N: exactly N positions for every
# test, and a test longer than N a usage error before the model loads (issue 32);
# size and parameter count in the JSON and readable in the table; --help says all that;
# the option table: every option listed, every bad value a usage error before loading.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/minfer
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=0; F=0; S=0
ok() { P=$((P + 1)); }
fail() { F=$((F + 1)); echo "FAIL: $*" >&2; }
check() { local what=$1; shift; if "$@"; then ok; else fail "$what"; fi; }
expect_exit() { # expected-code description needle command...: exit code, one error line naming needle
    local want=$1 what=$2 needle=$3; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    if [ "$rc" -ne "$want" ]; then fail "$what: exit $rc, want $want ($(head -c 300 "$TMP/err"))"; return; fi
    if ! grep -q "^minfer: error: .*$needle" "$TMP/err"; then fail "$what: no 'minfer: error: ...$needle' line: $(cat "$TMP/err")"; return; fi
    ok
}

if ! "$BIN" synth --shape tiny --quant q4_k_m -o "$TMP/tiny.gguf" >/dev/null 2>"$TMP/synth.err"; then
    fail "synth tiny: $(cat "$TMP/synth.err")"
    echo "RESULT e2e_bench passed=$P failed=$F skipped=$S"
    exit 1
fi
M=$TMP/tiny.gguf

# -s without a prompt, and with one: names, fields, rates
"$BIN" bench -m "$M" -p 0,8 -n 4 -s 1,3 -r 2 --device cpu -t 1 -o json >"$TMP/s.json" 2>"$TMP/s.err"; rc=$?
check "bench -s exit 0 (got $rc: $(tail -n 2 "$TMP/s.err"))" [ "$rc" -eq 0 ]
check "bench -s json: names, n_seq, aggregate = n_seq x per sequence, n_ctx = prompt + gen" "$PY" -c "
import json
d = json.load(open('$TMP/s.json'))
assert [x['test'] for x in d] == ['tg4@s1', 'tg4@s3', 'pp8+tg4@s1', 'pp8+tg4@s3'], [x['test'] for x in d]
for x in d:
    for k in ('test', 'n_prompt', 'n_gen', 'n_seq', 'n_ctx', 'avg_ts', 'stddev_ts', 'seq_avg_ts', 'seq_stddev_ts',
              'prefill', 'pp_avg_ts', 'size', 'params'):
        assert k in x, (k, x)
    assert x['n_seq'] == int(x['test'].split('@s')[1]), x
    assert x['avg_ts'] > 0 and x['stddev_ts'] >= 0, x
    assert abs(x['seq_avg_ts'] * x['n_seq'] - x['avg_ts']) <= 1e-3 * x['avg_ts'] + 0.01, x
    assert x['n_ctx'] == x['n_prompt'] + x['n_gen'], x
    assert x['prefill'] == 'per sequence', x
    assert (x['pp_avg_ts'] > 0) == (x['n_prompt'] > 0), x
    assert x['size'] > 0 and x['params'] > 0, x
"
check "bench -s logs the prefill as one sequence after another" grep -q 'prefill 3 x 8 tokens, one sequence after another' "$TMP/s.err"

# the table: an n_seq column, both rates, a readable size
"$BIN" bench -m "$M" -p 0 -n 4 -s 2 -r 1 --device cpu -t 1 >"$TMP/s.md" 2>/dev/null
check "bench -s table has n_seq and per-sequence columns" grep -q '| test | n_seq | t/s (all sequences) | t/s (per sequence) |' "$TMP/s.md"
check "bench -s table row" grep -qE '\| tg4@s2 \| 2 \| [0-9.]+ ± [0-9.]+ \| [0-9.]+ ± [0-9.]+ \| - \|' "$TMP/s.md"
check "bench table shows the size in MiB, not 0.00 GiB" grep -qE '\| [0-9.]+ MiB \| [0-9.]+ M \|' "$TMP/s.md"

# --ctx N: exactly N for every test (plain and -s)
"$BIN" bench -m "$M" -p 8 -n 4 -r 1 --ctx 40 --device cpu -t 1 -o json >"$TMP/c.json" 2>/dev/null
"$BIN" bench -m "$M" -p 8 -n 4 -s 2 -r 1 --ctx 40 --device cpu -t 1 -o json >"$TMP/cs.json" 2>/dev/null
check "bench --ctx 40: every test in 40 positions" "$PY" -c "
import json
d = json.load(open('$TMP/c.json')) + json.load(open('$TMP/cs.json'))
assert [x['test'] for x in d] == ['pp8', 'tg4', 'pp8+tg4@s2'], d
assert all(x['n_ctx'] == 40 for x in d), d
"
# a test longer than --ctx: a usage error before the model loads (the model path does not exist)
expect_exit 1 "bench --ctx below a test" "pp512 needs 512 positions, above --ctx 100" \
    "$BIN" bench -m "$TMP/absent.gguf" -p 512 -n 4 --ctx 100
expect_exit 1 "bench -s --ctx below prompt + gen" "pp8+tg4@s2 needs 12 positions per sequence, above --ctx 10" \
    "$BIN" bench -m "$TMP/absent.gguf" -p 8 -n 4 -s 2 --ctx 10
expect_exit 1 "bench -s 0" "out of range" "$BIN" bench -m "$M" -s 0
expect_exit 1 "bench -s with -n 0" "generation length" "$BIN" bench -m "$M" -n 0 -s 2

# --help tells the truth about both
"$BIN" bench --help >"$TMP/help" 2>&1
check "bench --help: -s" grep -q -- '-s LIST' "$TMP/help"
check "bench --help: prefill per sequence" grep -q 'prefill is per sequence' "$TMP/help"
check "bench --help: --ctx exactly N" grep -Eq -- '^  (-c, )?--ctx N +exactly N positions' "$TMP/help"

# The option table (issue 32): --help lists every option bench takes, with its default,
# and each bad value is a usage error (exit 1, one line naming the option) before the
# model is opened (the model path does not exist: opening it would be exit 2).
for o in '-m, --model PATH' '-p LIST' '-n LIST' '-s LIST' '-r N' '-b N' '-c, --ctx N' '--device D' '-t, --threads N' '-o FMT'; do
    check "bench --help lists '$o'" grep -Eq -- "^  $o( |\$)" "$TMP/help"
done
check "bench --help: the defaults (512, 128, 3, md)" bash -c "grep -q 'default 512)' '$TMP/help' &&
    grep -q 'default 128)' '$TMP/help' && grep -q 'default 3)' '$TMP/help' && grep -q 'one of: md, json; default md)' '$TMP/help'"
N=$TMP/absent.gguf
expect_exit 1 "bench -p abc" "option -p: 'abc' is not a comma-separated list" "$BIN" bench -m "$N" -p abc
expect_exit 1 "bench -p 1,,2" "option -p: '1,,2' has an empty" "$BIN" bench -m "$N" -p 1,,2
expect_exit 1 "bench -p 8, (trailing comma)" "option -p: '8,' has an empty" "$BIN" bench -m "$N" -p 8,
expect_exit 1 "bench -p -1" "option -p: -1 is out of range \\[0, 1048576\\]" "$BIN" bench -m "$N" -p -1
expect_exit 1 "bench -n 99999999999999999999" "option -n: 99999999999999999999 is out of range" \
    "$BIN" bench -m "$N" -n 99999999999999999999
expect_exit 1 "bench -p with 17 values" "option -p: at most 16 values" "$BIN" bench -m "$N" -p 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
expect_exit 1 "bench -s 1025" "option -s: 1025 is out of range \\[1, 1024\\]" "$BIN" bench -m "$N" -s 1025
expect_exit 1 "bench -r 0" "option -r: 0 is out of range \\[1, 1000\\]" "$BIN" bench -m "$N" -r 0
expect_exit 1 "bench -b 0" "option -b: 0 is out of range" "$BIN" bench -m "$N" -b 0
expect_exit 1 "bench -o xml" "option -o: 'xml' is not one of: md, json" "$BIN" bench -m "$N" -o xml
expect_exit 1 "bench -t 0" "option -t: 0 is out of range" "$BIN" bench -m "$N" -t 0
expect_exit 1 "bench --ctx 0" "option --ctx: 0 is out of range" "$BIN" bench -m "$N" --ctx 0
expect_exit 1 "bench -r without its value" "option -r needs a value" "$BIN" bench -m "$N" -r
expect_exit 1 "bench unknown option" "bench: unknown option '--frob'" "$BIN" bench -m "$N" --frob
expect_exit 1 "bench without -m" "bench: -m MODEL is required" "$BIN" bench -p 8
expect_exit 1 "bench -p 0 -n 0" "no test" "$BIN" bench -m "$N" -p 0 -n 0
expect_exit 2 "bench: good options reach the model (absent)" "cannot open" "$BIN" bench -m "$N" -p 8 -n 4 -r 1 -b 4 -o json
# the JSON names the pool's thread count, not the request (-t 1000: capped at the cores)
"$BIN" bench -m "$M" -p 0 -n 2 -r 1 --device cpu -t 1000 -o json >"$TMP/t.json" 2>"$TMP/t.err"
check "bench -t 1000: one warning, JSON n_threads = $(nproc) cores" "$PY" -c "
import json
d = json.load(open('$TMP/t.json'))
assert [x['n_threads'] for x in d] == [$(nproc)], d
assert open('$TMP/t.err').read().count('warning: -t 1000 is more than') == 1
"

echo "RESULT e2e_bench passed=$P failed=$F skipped=$S"
[ "$F" -eq 0 ]
