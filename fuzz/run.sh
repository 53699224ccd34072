#!/usr/bin/env bash
# fuzz/run.sh SECONDS [TARGET...] - runs each libFuzzer target (default: all of
# $BUILD/fuzz/fuzz_*) for SECONDS, one at a time, on a working corpus in
# $BUILD/fuzz/corpus/<target> seeded from fuzz/corpus/<target>. A crash, leak, hang
# (over FUZZ_TIMEOUT s, default 10) or an input over 2 GB of RSS stops that target;
# its input is left in $BUILD/fuzz/artifacts/<target>/ and the script exits 1.
# Each target's last stats line (execs/s, cov, ft, corpus) goes to
# $BUILD/fuzz/<target>.log. `make fuzz` first; `make fuzz-run FUZZ_TIME=N` does both.
# FUZZ_SEED=N fixes libFuzzer's random seed; FUZZ_RUNS=N stops each target after N
# inputs (CI's smoke run sets both: the same inputs every run, SECONDS only a cap).
set -u
SECS=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
BUILD=${BUILD:-build}
SHARED=${MINFER_SHARED:-../shared}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for b in "$BUILD"/fuzz/fuzz_*; do [ -x "$b" ] && targets+=("$(basename "$b")"); done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz/run.sh: no targets in $BUILD/fuzz (make fuzz)" >&2; exit 1; }
bad=0
for t in "${targets[@]}"; do
    t=${t#fuzz_}
    bin=$BUILD/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "fuzz/run.sh: $bin missing (make fuzz)" >&2; bad=1; continue; }
    if [ "$t" = tokenizer ] && [ ! -d "$SHARED/vocab" ] && [ -z "${MINFER_FUZZ_VOCABS:-}" ]; then
        echo "SKIP fuzz_$t: $SHARED/vocab absent"; continue
    fi
    corpus=$BUILD/fuzz/corpus/$t
    art=$BUILD/fuzz/artifacts/$t
    mkdir -p "$corpus" "$art"
    dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
    maxlen=4096
    [ "$t" = gguf ] && maxlen=65536
    log=$BUILD/fuzz/$t.log
    echo "== fuzz_$t: ${SECS}s"
    MINFER_SHARED=$SHARED "$bin" -max_total_time="$SECS" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 \
        -max_len=$maxlen -seed="${FUZZ_SEED:-0}" -runs="${FUZZ_RUNS:--1}" -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" \
        "$corpus" $([ -d "fuzz/corpus/$t" ] && echo "fuzz/corpus/$t") >"$log" 2>&1
    rc=$?
    # the last periodic stats line: "#N  REDUCE cov: C ft: F corp: K/.. exec/s: E rss: R"
    grep -E '^#[0-9]+' "$log" | tail -n 1
    grep -E '^stat::' "$log" | tr '\n' ' '; echo
    if [ "$rc" -ne 0 ]; then
        echo "FAIL fuzz_$t: exit $rc; inputs in $art:"; ls "$art"
        grep -E 'ERROR|SUMMARY|==[0-9]+==' "$log" | head -n 20
        bad=1
    fi
done
exit $bad
