#!/usr/bin/env bash
# bench/bench_cuda.sh [BIN] - GPU benchmark (make bench-cuda), on a machine with a GPU.
#   synthesises a llama-2-7B-shaped q4_k_m model (random weights, llama.cpp's mix; `synth
#   --fast`, seconds instead of ~2 minutes, unless MINFER_SYNTH_FLAGS says otherwise, e.g.
#   empty for the default path) unless $MINFER_BENCH_MODEL exists, then `minfer bench -p 512,3314 -n 128 --device cuda`, then
#   tg128 again with each optional path of the table off (MINFER_CUDA_DISABLE=name:
#   what each path is worth), then the GEMV kernel lab (build/bench/cuda_gemv, the variants per 7B shape, then its
#   chain experiment: a layer's GEMVs in one persistent kernel) when built, and prints decode bandwidth
#   (weight bytes per token x tokens per second).
# Env: MINFER_BENCH_MODEL (path), PP (512,3314), TG (128), REPS (3), BENCH_VARIANTS (1),
#   VARIANTS (the paths to turn off one at a time, space separated, ',' joins several;
#   default every path of the table), PREV_BIN (another minfer binary, e.g. the tree
#   before a change: AB_ROUNDS (5) alternating rounds of tg128, this binary then that one,
#   in the same run), LAB_RUN (1: run the kernel lab).
set -u
BIN=${1:-build/minfer}
MODEL=${MINFER_BENCH_MODEL:-${TMPDIR:-/tmp}/minfer-7b-q4_k_m.gguf}
if [ ! -f "$MODEL" ]; then
    t0=$(date +%s)
    "$BIN" synth --shape 7b --quant q4_k_m ${MINFER_SYNTH_FLAGS---fast} -o "$MODEL" >/dev/null || exit 1
    echo "synth 7b q4_k_m: $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv,noheader 2>/dev/null || true
OUTJ=${TMPDIR:-/tmp}/minfer-bench-$$.json
# (a failure here still leaves the switch list and the lab to run)
"$BIN" bench -m "$MODEL" -p "${PP:-512,3314}" -n "${TG:-128}" -r "${REPS:-3}" --device cuda -o json >"$OUTJ" ||
    echo "bench_cuda.sh: minfer bench failed (exit $?)"
[ -s "$OUTJ" ] && python3 - "$OUTJ" "$MODEL" <<'EOF'
import json, os, sys
res = json.load(open(sys.argv[1]))
size = os.path.getsize(sys.argv[2])  # file bytes ~ weight bytes (+ a few MiB of metadata)
print("| test | t/s | stddev | note |\n|---|---:|---:|---|")
for r in res:
    note = ""
    if r["n_gen"]:
        note = "%.0f GB/s of weights (%.2f GiB/token)" % (size * r["avg_ts"] / 1e9, size / 2**30)
    print("| %s | %.2f | %.2f | %s |" % (r["test"], r["avg_ts"], r["stddev_ts"], note))
EOF
if [ "${BENCH_VARIANTS:-1}" = 1 ]; then
    # (tg runs in a context of its own length, 128: one attention chunk of 128 by default)
    # (an entry may set several variables joined by '+')
    tg() { # BINARY [minfer bench options...] -> "avg +/- stddev" of tg${TG:-128}
        local bin=$1
        shift
        "$bin" bench -m "$MODEL" -p 0 -n "${TG:-128}" -r "${REPS:-3}" --device cuda -o json "$@" 2>/dev/null |
            python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print("%.2f +/- %.2f" % (r["avg_ts"], r["stddev_ts"]))'
    }
    if [ -n "${PREV_BIN:-}" ] && [ -x "$PREV_BIN" ]; then
        for r in $(seq 1 "${AB_ROUNDS:-5}"); do
            a=$(tg "$BIN"); b=$(tg "$PREV_BIN")
            echo "tg${TG:-128} round $r: this $a, PREV_BIN $b tok/s"
        done
    fi
    PATHS=$("$(dirname "$BIN")/tools/cuda_paths" 2>/dev/null)
    for v in ${VARIANTS:-$PATHS}; do
        echo "tg${TG:-128} with $v off: $(MINFER_CUDA_DISABLE=$v tg "$BIN") tok/s"
    done
    for c in 3314; do  # decode in a long context's attention grid (13 chunks of 256)
        echo "tg${TG:-128} in a $c-token context: $(tg "$BIN" --ctx $c) tok/s"
    done
fi
rm -f "$OUTJ"
LAB=$(dirname "$BIN")/bench/cuda_gemv
if [ -x "$LAB" ] && [ "${LAB_RUN:-1}" = 1 ]; then
    "$LAB"
    # the chain experiment (cuda_gemv.cu): a layer's GEMVs in one persistent kernel; a
    # grid barrier inside, so a time limit in case it ever fails to make progress
    timeout 120 "$LAB" chain 4 50 || echo "cuda_gemv chain: exit $?"
fi
