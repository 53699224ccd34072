#!/usr/bin/env bash
# tests/cuda/real_models.sh MODEL_DIR [BUILD] - the real models of scripts/get-model on the GPU
# against the CPU (issue 31), on a machine with a GPU and a CUDA build ($BUILD/minfer,
# $BUILD/tools/greedy_trace, $BUILD/tests/cuda/test_arch_cuda; default BUILD=build):
#   1. tests/cuda/test_arch_cuda (tiny gemma3 / qwen2 / llama+window, GPU vs CPU logits);
#   2. per model found in MODEL_DIR (SmolLM2-135M-Instruct.Q4_1, qwen2.5-coder-1.5b-instruct-q4_k_m,
#      gemma-3-270m-Q4_K_M .gguf): perplexity of texts/emma-ch1.txt at --ctx 512 on the CPU
#      and on cuda, checked within 1% of each other; greedy 64 tokens on three prompts,
#      cuda vs cpu: the first divergence and the top-2 margin there (reported); a two-turn
#      chat on cuda at --temp 0 (printed, for a reader to judge); bench pp512/tg128 on cuda.
# Ends with "N passed, N failed".
set -u
DIR=${1:?usage: tests/cuda/real_models.sh MODEL_DIR [BUILD]}
BUILD=${2:-build}
BIN="$BUILD/minfer"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

if [ -x "$BUILD/tests/cuda/test_arch_cuda" ]; then
    out=$("$BUILD/tests/cuda/test_arch_cuda" 2>&1)
    echo "$out"
    r=$(echo "$out" | sed -n 's/^RESULT .* passed=\([0-9]*\) failed=\([0-9]*\).*/\1 \2/p')
    pass=$((pass + ${r%% *}))
    fail=$((fail + ${r##* }))
else
    bad "$BUILD/tests/cuda/test_arch_cuda missing (make BUILD=$BUILD $BUILD/tests/cuda/test_arch_cuda)"
fi

ppl() { "$BIN" perplexity -m "$1" -f texts/emma-ch1.txt --ctx 512 --device "$2" -q 2>&1 | sed -n 's/^estimate: PPL = \([0-9.]*\).*/\1/p'; }
PROMPTS=("The capital of France is" "Once upon a time, in a small village by the sea," $'def fibonacci(n):\n')
for name in SmolLM2-135M-Instruct.Q4_1 qwen2.5-coder-1.5b-instruct-q4_k_m gemma-3-270m-Q4_K_M; do
    M="$DIR/$name.gguf"
    [ -s "$M" ] || { echo "skip: $M absent (scripts/get-model)"; continue; }
    echo "== $name"
    pc=$(ppl "$M" cpu)
    pg=$(ppl "$M" cuda)
    if [ -n "$pc" ] && [ -n "$pg" ] && python3 -c "import sys; a,b=float('$pc'),float('$pg'); sys.exit(0 if abs(a-b)/a < 0.01 else 1)"; then
        ok "$name perplexity cpu $pc, cuda $pg (within 1%)"
    else
        bad "$name perplexity cpu '$pc', cuda '$pg'"
    fi
    for P in "${PROMPTS[@]}"; do
        "$BUILD/tools/greedy_trace" "$M" "$P" 64 cpu > /tmp/rm_cpu.$$ 2>/dev/null
        "$BUILD/tools/greedy_trace" "$M" "$P" 64 cuda > /tmp/rm_gpu.$$ 2>/dev/null
        python3 - /tmp/rm_cpu.$$ /tmp/rm_gpu.$$ "$P" <<'PY'
import sys
c = [l.split("\t") for l in open(sys.argv[1])]
g = [l.split("\t") for l in open(sys.argv[2])]
d = next((i for i in range(min(len(c), len(g))) if c[i][1] != g[i][1]), None)
p = repr(sys.argv[3])[:32]
if not c or not g: print(f"  greedy {p}: no output (cpu {len(c)}, cuda {len(g)} tokens)")
elif d is None: print(f"  greedy {p}: cuda = cpu for {min(len(c), len(g))} tokens")
else: print(f"  greedy {p}: first divergence at token {d}: cpu {c[d][6].strip()} (margin {float(c[d][5]):.4f}), cuda {g[d][6].strip()} (margin {float(g[d][5]):.4f})")
PY
    done
    rm -f /tmp/rm_cpu.$$ /tmp/rm_gpu.$$
    echo "  chat on cuda:"
    printf 'What is the capital of France?\nAnd what is it famous for?\n/exit\n' |
        timeout 120 "$BIN" chat -m "$M" --device cuda --temp 0 -n 64 2>/dev/null | sed 's/^/    /'
    "$BIN" bench -m "$M" --device cuda -p 512 -n 128 -r 3 2>&1 | grep "bench: \(pp\|tg\)"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
