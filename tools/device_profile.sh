#!/usr/bin/env bash
# tools/device_profile.sh [DIR] - on the GPU machine, in the tree staged by
# `STAGE_TRACE=1 tools/stage_device.sh`: the last decode step of a tg128 run of the 7B
# synth as a block timeline (DIR/b/minfer.trace, built with -DMINFER_CUDA_TRACE=1;
# src/cuda/trace.cu): per launch its blocks' start, its wait release, its end and the
# boundary after it, then the time by kernel (bench/trace_step.py). The MINFER_CUDA_SKIP
# prices only give differences; this shows where a step's time goes and which kernels
# wait. (The GPU machine has no Nsight Systems; ncu serialises kernels, so it cannot
# show the PDL chain.) The trace build runs 3-8% slower than the normal one: use it
# for where the time goes, `minfer bench` for how much.
# Env: MINFER_BENCH_MODEL (made with `minfer synth --shape 7b --quant q4_k_m --fast` if
# absent), OUT (default /tmp: the log and the table; the raw trace, ~4 MB, stays in
# ${TMPDIR:-/tmp}), N (tokens, default 128), and
# any MINFER_CUDA_* switch, passed on to minfer.
set -u
DIR=${1:-.device}
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$DIR/b/minfer.trace
[ -x "$BIN" ] || { echo "device_profile: no $BIN (stage with STAGE_TRACE=1 tools/stage_device.sh)"; exit 1; }
MODEL=${MINFER_BENCH_MODEL:-/tmp/minfer-7b-q4_k_m.gguf}
if [ ! -f "$MODEL" ]; then
    "$BIN" synth --shape 7b --quant q4_k_m ${MINFER_SYNTH_FLAGS---fast} -o "$MODEL" >/dev/null || exit 1
fi
RAW=${TMPDIR:-/tmp}/minfer-trace.txt
MINFER_CUDA_TRACE="$RAW" "$BIN" bench -m "$MODEL" -p 0 -n "${N:-128}" -r 1 --device cuda \
    >"$OUT/trace.log" 2>&1 || { echo "device_profile: minfer failed"; tail -n 5 "$OUT/trace.log"; exit 1; }
grep -E "trace:|bench:" "$OUT/trace.log"
python3 bench/trace_step.py "$RAW" | tee "$OUT/trace_step.txt"
