#!/usr/bin/env bash
# tools/device_profile.sh [DIR] - on the GPU machine, in the tree staged by
# tools/stage_device.sh: one decode step of the 7B synth as a kernel timeline (Nsight
# Systems, when the machine has it): each kernel of one graph replay with its start
# (from the step's first kernel), its duration and the gap before it (negative: it
# overlapped the kernel before, as PDL allows). The MINFER_CUDA_SKIP prices only give
# differences; this shows where a step's time goes and which kernels wait.
# Env: MINFER_BENCH_MODEL (made with `minfer synth --shape 7b --quant q4_k_m --fast` if absent),
# OUT (default /tmp: the report and its CSV), STEP (which decode step, default 20),
# and any MINFER_CUDA_* switch, passed on to minfer.
set -u
DIR=${1:-.device}
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$DIR/b/minfer
MODEL=${MINFER_BENCH_MODEL:-/tmp/minfer-7b-q4_k_m.gguf}
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
if [ -z "$NSYS" ]; then
    echo "device_profile: no nsys on this machine (PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-systems)"
    exit 0
fi
if [ ! -f "$MODEL" ]; then
    "$BIN" synth --shape 7b --quant q4_k_m ${MINFER_SYNTH_FLAGS---fast} -o "$MODEL" >/dev/null || exit 1
fi
"$NSYS" profile --trace=cuda --cuda-graph-trace=node -f true -o "$OUT/decode" \
    "$BIN" bench -m "$MODEL" -p 0 -n 40 -r 1 --device cuda >"$OUT/decode.log" 2>&1 ||
    { echo "device_profile: nsys profile failed"; tail -n 5 "$OUT/decode.log"; exit 1; }
rm -f "$OUT"/decode*cuda_gpu_trace*.csv  # (nsys stats' -f is --format: no overwrite flag here)
"$NSYS" stats --report cuda_gpu_trace --format csv -o "$OUT/decode" "$OUT/decode.nsys-rep" \
    >>"$OUT/decode.log" 2>&1 || { echo "device_profile: nsys stats failed"; tail -n 5 "$OUT/decode.log"; exit 1; }
CSV=$(ls "$OUT"/decode*cuda_gpu_trace*.csv 2>/dev/null | head -n 1)
[ -n "$CSV" ] || { echo "device_profile: no cuda_gpu_trace CSV"; exit 1; }
python3 - "$CSV" "${STEP:-20}" <<'EOF'
import csv, re, sys
rows = []
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        name = r.get("Name", "")
        if "[CUDA mem" in name or not r.get("GrdX"):  # kernels only
            continue
        rows.append((int(r["Start (ns)"]), int(r["Duration (ns)"]), name))
rows.sort()
# a decode step starts with the embedding gather
starts = [i for i, r in enumerate(rows) if re.search(r"kernel_embed\b", r[2])]
step = int(sys.argv[2])
if len(starts) < step + 2:
    sys.exit("device_profile: only %d steps in the trace" % len(starts))
a, b = starts[step], starts[step + 1]
t0 = rows[a][0]
def short(n):
    n = re.sub(r"\(.*", "", n)             # the argument list
    return re.sub(r"^void ", "", n)[:60]
print("| # | kernel | start us | dur us | gap us |\n|---:|---|---:|---:|---:|")
prev_end = None
tot = {}
for i in range(a, b):
    s, d, n = rows[i]
    gap = "" if prev_end is None else "%.2f" % ((s - prev_end) / 1e3)
    print("| %d | %s | %.2f | %.2f | %s |" % (i - a, short(n), (s - t0) / 1e3, d / 1e3, gap))
    prev_end = s + d if prev_end is None else max(prev_end, s + d)
    k = re.sub(r"<.*", "", short(n))
    tot[k] = tot.get(k, 0) + d
step_us = (rows[b][0] - t0) / 1e3
print("\nstep %d: %.1f us from its first kernel to the next step's; kernel time by name (sums, us):" % (step, step_us))
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print("  %-40s %9.1f" % (k, v / 1e3))
EOF
