#!/usr/bin/env bash
# tools/device_session.sh unpack - on the GPU machine: the staged tree out of
# build-devpack/device.tar.xz (tools/stage_device.sh), before the rest.
# tools/device_session.sh [DIR] [tests|bench|all] - on the GPU machine, in the working
# tree staged by tools/stage_device.sh: the CUDA test suite (tests), the GPU benchmark
# (bench; it makes the 7B q4_k_m synth with --fast, seconds, unless $MINFER_BENCH_MODEL
# exists; MINFER_SYNTH_FLAGS= (empty) for the default synth, ~2 minutes), or
# both (all, the default; the synth then runs in the background during the tests).
# Logs in $OUT (default /tmp). Each part has a time cap (TEST_CAP, BENCH_CAP: 540 s);
# with a 600 s limit per remote command, run "tests" and "bench" as two calls. After the
# benchmark, where DIR/b/minfer.trace was staged (STAGE_TRACE=1), one decode step's
# block timeline too (tools/device_profile.sh, a few seconds; $OUT/trace_step.txt).
set -u
if [ "${1:-}" = unpack ]; then
    # the staged tree from tools/stage_device.sh's pack (carry ["build-devpack"])
    python3 -c 'import tarfile; tarfile.open("build-devpack/device.tar.xz").extractall(".")' &&
        echo "device_session: build-devpack/device.tar.xz unpacked" || { echo "device_session: unpack failed"; exit 1; }
    exit 0
fi
DIR=${1:-.device}
PART=${2:-all}
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$DIR/b/minfer
export MINFER_SHARED=${MINFER_SHARED:-$DIR}  # run_cuda.sh finds stories260K there
export MINFER_TEST_THREADS=${MINFER_TEST_THREADS:-$(nproc)}  # the CPU reference of the op tests
MODEL=${MINFER_BENCH_MODEL:-/tmp/minfer-7b-q4_k_m.gguf}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null || true
if [ "$PART" != tests ] && [ ! -f "$MODEL" ]; then
    ( t0=$(date +%s); "$BIN" synth --shape 7b --quant q4_k_m ${MINFER_SYNTH_FLAGS---fast} -o "$MODEL" >/dev/null 2>&1
      echo "synth 7b q4_k_m: $(( $(date +%s) - t0 )) s" >"$OUT/synth.txt" ) &
    SYNTH=$!
fi
if [ "$PART" != bench ]; then
    echo "== tests/run_cuda.sh"
    MINFER_TEST_TIMEOUT=${MINFER_TEST_TIMEOUT:-400} timeout "${TEST_CAP:-540}" bash tests/run_cuda.sh "$BIN" \
        >"$OUT/tests.txt" 2>&1
    echo "run_cuda.sh exit $?"
    # every failure first (a long run's tail alone once hid three of seven), then the tail
    grep -E '^FAIL|FAIL ' "$OUT/tests.txt" | head -n 40
    grep -E '^(FAIL|RESULT|ok|info)|passed,' "$OUT/tests.txt" | tail -n 40
fi
[ -n "${SYNTH:-}" ] && wait "$SYNTH" && cat "$OUT/synth.txt"
if [ "$PART" != tests ]; then
    echo "== bench/bench_cuda.sh"
    MINFER_BENCH_MODEL=$MODEL timeout "${BENCH_CAP:-540}" bash bench/bench_cuda.sh "$BIN" >"$OUT/bench.txt" 2>&1
    echo "bench_cuda.sh exit $?"
    cat "$OUT/bench.txt"
    if [ -x "$DIR/b/minfer.trace" ]; then
        echo "== tools/device_profile.sh"
        OUT=$OUT MINFER_BENCH_MODEL=$MODEL timeout 120 bash tools/device_profile.sh "$DIR" >"$OUT/profile.txt" 2>&1
        echo "device_profile.sh exit $?"
        tail -n 16 "$OUT/profile.txt"
    fi
fi
