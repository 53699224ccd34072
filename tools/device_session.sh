#!/usr/bin/env bash
# tools/device_session.sh [DIR] - on the GPU machine, in the working tree staged by
# tools/stage_device.sh: the CUDA test suite, then the GPU benchmark (7B q4_k_m synth
# made here, in the background while the tests run), logs and a summary in $OUT
# (default /tmp). Each part under a time cap so one call fits the device budget.
set -u
DIR=${1:-.device}
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$DIR/b/minfer
export MINFER_SHARED=${MINFER_SHARED:-$DIR}  # run_cuda.sh finds stories260K there
MODEL=${MINFER_BENCH_MODEL:-/tmp/minfer-7b-q4_k_m.gguf}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null || true
if [ ! -f "$MODEL" ]; then
    ( t0=$(date +%s); "$BIN" synth --shape 7b --quant q4_k_m -o "$MODEL" >/dev/null 2>&1
      echo "synth 7b q4_k_m: $(( $(date +%s) - t0 )) s" >"$OUT/synth.txt" ) &
    SYNTH=$!
fi
echo "== tests/run_cuda.sh"
MINFER_TEST_TIMEOUT=${MINFER_TEST_TIMEOUT:-250} timeout "${TEST_CAP:-420}" bash tests/run_cuda.sh "$BIN" \
    >"$OUT/tests.txt" 2>&1
echo "run_cuda.sh exit $?"
grep -E '^(FAIL|RESULT|ok|info)|passed,' "$OUT/tests.txt" | tail -n 60
[ -n "${SYNTH:-}" ] && wait "$SYNTH" && cat "$OUT/synth.txt"
echo "== bench/bench_cuda.sh"
MINFER_BENCH_MODEL=$MODEL timeout "${BENCH_CAP:-420}" bash bench/bench_cuda.sh "$BIN" >"$OUT/bench.txt" 2>&1
echo "bench_cuda.sh exit $?"
cat "$OUT/bench.txt"
