#!/usr/bin/env bash
# bench/cpu_compare.sh - minfer vs llama.cpp on the CPU, same file, same threads,
# alternating runs (this machine is shared: alternating keeps both engines under
# the same background load; compare the medians and the best runs).
#
#   LLAMA_BENCH=/tmp/llamacpp/build/bin/llama-bench bench/cpu_compare.sh MODEL [ROUNDS] [THREADS]
#
# llama.cpp build used for bench/RESULTS.md (CPU backend, AVX2 only, no AVX-512/AMX):
#   cmake -B build -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
#         -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF \
#         -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF
#   cmake --build build -j2 --target llama-bench
# (check `grep GGML_NATIVE build/CMakeCache.txt` says OFF: a native build here uses AMX.)
set -u
MODEL=${1:?model}
ROUNDS=${2:-5}
T=${3:-$(nproc)}
BIN=${BIN:-build/minfer}
LB=${LLAMA_BENCH:-/tmp/llamacpp/build/bin/llama-bench}
echo "# $(date -u +%F) $(uname -m) $(nproc) cores, -t $T, model $MODEL"
for r in $(seq "$ROUNDS"); do
    m=$("$BIN" bench -m "$MODEL" -p 128 -n 32 -r 3 -t "$T" --device cpu 2>&1 |
        sed -n 's/.*bench: \(pp128\|tg32\) \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2 \3/p' | tr '\n' ' ')
    l=$("$LB" -m "$MODEL" -p 128 -n 32 -r 3 -t "$T" 2>/dev/null |
        sed -n 's/.*| *\(pp128\|tg32\) *| *\([0-9.]*\) ± \([0-9.]*\) |.*/\1 \2 \3/p' | tr '\n' ' ')
    echo "round $r minfer: $m| llama.cpp: $l| load $(cut -d' ' -f1 /proc/loadavg)"
done
