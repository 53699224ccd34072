#!/usr/bin/env bash
# bench/bench_cpu.sh - `make bench`: CPU prefill/decode on the synthetic 1B q4_k_m
# model (TinyLlama-1.1B shape, made once with `minfer synth` and cached in models/)
# and on the default real model. Figures go to stdout as llama-bench-style tables.
set -euo pipefail
BIN=${1:-build/minfer}
THREADS=${THREADS:-$(nproc)}
mkdir -p models
SYNTH=models/synth-1b-q4_k_m.gguf
[ -s "$SYNTH" ] || "$BIN" synth --shape 1b --quant q4_k_m --seed 1 -o "$SYNTH"
echo "## $(date -u +%F) $(uname -m), $(nproc) cores, -t $THREADS"
"$BIN" bench -m "$SYNTH" -p 128 -n 32 -r 3 -t "$THREADS" --device cpu
REAL=$(bash tools/fetch_model.sh)
"$BIN" bench -m "$REAL" -p 128 -n 32 -r 3 -t "$THREADS" --device cpu
