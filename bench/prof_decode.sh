#!/usr/bin/env bash
# bench/prof_decode.sh [BIN] [LAYERS] - per-kernel GPU time of decode steps (Nsight Compute,
# clocks left alone) on a llama-2-7B-shaped q4_k_m model cut to LAYERS layers (default 4):
# kernel durations in isolation, so the sum over one token is the step without launch gaps.
# PROF_KERNEL=REGEX (e.g. attn_dec): only the kernels whose names match, 4 launches after
# the first 16 (past the prefill), each with where its warps stall, its occupancy and its
# launch shape (ncu's WarpStateStats, Occupancy and LaunchStats sections). ncu runs kernels
# one at a time, so PDL overlap is gone from these figures: they show a kernel's own
# latency, not what it costs inside the step (the MINFER_CUDA_SKIP prices say that).
# PROF_CACHE=none keeps the caches between ncu's replays (default all: flushed, so every
# first touch, kernel parameters and code included, goes to DRAM).
set -u
BIN=${1:-build/minfer}
L=${2:-4}
M=${TMPDIR:-/tmp}/minfer-7b-l$L.gguf
[ -f "$M" ] || "$BIN" synth --shape 7b --quant q4_k_m --fast --layers "$L" -o "$M" >/dev/null || exit 1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "prof_decode: no ncu"; exit 1; }
if [ -n "${PROF_KERNEL:-}" ]; then
    "$NCU" --clock-control none --cache-control "${PROF_CACHE:-all}" -k "regex:$PROF_KERNEL" --launch-skip 16 --launch-count 4 \
        --section WarpStateStats --section Occupancy --section LaunchStats --section SpeedOfLight \
        "$BIN" run -m "$M" -p "" -n 12 --temp 0 --device cuda 2>&1 |
        grep -vE '^(==PROF==|minfer)' | sed -E 's/ +/ /g' | head -n 400
    exit 0
fi
"$NCU" --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    "$BIN" run -m "$M" -p "" -n 3 --temp 0 --device cuda 2>&1 |
    grep -E "^  [a-z_]|kernel_|gpu__time_duration|dram__bytes_read|Invocations" | sed -E 's/ +/ /g' | head -n 200
