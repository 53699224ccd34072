#!/usr/bin/env bash
# bench/prof_decode.sh [BIN] [LAYERS] - per-kernel GPU time of decode steps (Nsight Compute,
# clocks left alone) on a llama-2-7B-shaped q4_k_m model cut to LAYERS layers (default 4):
# kernel durations in isolation, so the sum over one token is the step without launch gaps.
set -u
BIN=${1:-build/minfer}
L=${2:-4}
M=${TMPDIR:-/tmp}/minfer-7b-l$L.gguf
[ -f "$M" ] || "$BIN" synth --shape 7b --quant q4_k_m --layers "$L" -o "$M" >/dev/null || exit 1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "prof_decode: no ncu"; exit 1; }
"$NCU" --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    "$BIN" run -m "$M" -p "" -n 3 --temp 0 --device cuda 2>&1 |
    grep -E "^  [a-z_]|kernel_|gpu__time_duration|dram__bytes_read|Invocations" | sed -E 's/ +/ /g' | head -n 200
