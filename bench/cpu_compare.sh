#!/usr/bin/env bash
# bench/cpu_compare.sh - minfer vs llama.cpp on the CPU, same file, same threads,
# alternating runs (this machine is shared: alternating keeps both engines under
# the same background load; compare the ratios per round and their median).
#
#   LLAMA_BENCH=/tmp/llama.cpp/build/bin/llama-bench bench/cpu_compare.sh MODEL [ROUNDS] [THREADS]
#
# llama.cpp built the way its users build it (native: -march=native, so AVX-512 /
# VNNI where the CPU has them), CPU only, outside the repository:
#   cmake -B build -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF \
#         -DCMAKE_BUILD_TYPE=Release
#   cmake --build build -j2 --target llama-bench
# Prints per round: minfer pp128/tg32, llama.cpp pp128/tg32, and the ratios
# minfer/llama.cpp; then the median ratios. The minfer notice line (kernel set)
# and the CPU flags that matter are printed first.
set -u
MODEL=${1:?model}
ROUNDS=${2:-5}
T=${3:-$(nproc)}
BIN=${BIN:-build/minfer}
LB=${LLAMA_BENCH:-/tmp/llama.cpp/build/bin/llama-bench}
[ -x "$LB" ] || { echo "cpu_compare: no llama-bench at $LB (set LLAMA_BENCH)" >&2; exit 1; }
echo "# $(date -u +%F) $(uname -m) $(nproc) cores, -t $T, model $MODEL"
echo "# cpu flags: $(grep -o -w 'avx2\|avx512f\|avx512bw\|avx512vl\|avx512_vnni\|avx512_bf16\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$BIN" bench -m "$MODEL" -p 8 -n 1 -r 1 -t "$T" --device cpu 2>&1 | grep 'minfer/cpu:' | head -1
RATIOS=$(mktemp)
trap 'rm -f "$RATIOS"' EXIT
for r in $(seq "$ROUNDS"); do
    m=$("$BIN" bench -m "$MODEL" -p 128 -n 32 -r 3 -t "$T" --device cpu 2>&1 |
        sed -n 's/.*bench: \(pp128\|tg32\) \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' | tr '\n' ' ')
    l=$("$LB" -m "$MODEL" -p 128 -n 32 -r 3 -t "$T" 2>/dev/null |
        sed -n 's/.*| *\(pp128\|tg32\) *| *\([0-9.]*\) ± \([0-9.]*\) |.*/\1 \2/p' | tr '\n' ' ')
    rp=$(awk -v m="$m" -v l="$l" 'BEGIN { split(m, a, " "); split(l, b, " ");
        if (b[2] > 0 && b[4] > 0) printf "%.2f %.2f", a[2] / b[2], a[4] / b[4]; else printf "- -" }')
    echo "$rp" >> "$RATIOS"
    echo "round $r minfer: $m| llama.cpp: $l| ratio pp128 ${rp% *}x tg32 ${rp#* }x | load $(cut -d' ' -f1 /proc/loadavg)"
done
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
echo "median ratio (minfer / llama.cpp) over $ROUNDS rounds: pp128 $(cut -d' ' -f1 "$RATIOS" | med)x," \
     "tg32 $(cut -d' ' -f2 "$RATIOS" | med)x"
