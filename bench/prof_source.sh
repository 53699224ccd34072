#!/usr/bin/env bash
# bench/prof_source.sh BIN KERNEL_REGEX [LAYERS] - where one decode kernel's warps wait,
# per SASS instruction (Nsight Compute's source page, warp-stall samples): the top 40
# instructions by samples, with their stall reasons. Decode steps of the 7B q4_k_m synth
# cut to LAYERS layers (default 4), graph off so ncu sees each launch; 4 launches after
# the first 16 (past the prefill), caches kept between replays (as in the step).
# Made for the decode attention (KERNEL_REGEX attn_dec) and the GEMVs (mmv_xst).
# (Written 2026-11-29 after the session's device time was spent: not yet run; if ncu's CSV
# differs from what the parser expects it prints the first lines it got.)
set -u
BIN=${1:?usage: prof_source.sh BIN KERNEL_REGEX [LAYERS]}
K=${2:?usage: prof_source.sh BIN KERNEL_REGEX [LAYERS]}
L=${3:-4}
M=${TMPDIR:-/tmp}/minfer-7b-l$L.gguf
[ -f "$M" ] || "$BIN" synth --shape 7b --quant q4_k_m --fast --layers "$L" -o "$M" >/dev/null || exit 1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "prof_source: no ncu"; exit 1; }
REP=${TMPDIR:-/tmp}/prof-source-$$
MINFER_CUDA_DISABLE=graph "$NCU" --clock-control none --cache-control none -k "regex:$K" --launch-skip 16 --launch-count 4 \
    --section SourceCounters --section WarpStateStats -o "$REP" -f \
    "$BIN" run -m "$M" -p "" -n 12 --temp 0 --device cuda >/dev/null 2>&1 || { echo "prof_source: ncu failed"; exit 1; }
"$NCU" -i "$REP.ncu-rep" --page source --print-source sass --csv 2>/dev/null >"$REP.csv"
python3 - "$REP.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
# the header row is the one that names the source column
hi = next((i for i, r in enumerate(rows) if any(c.strip() in ("Source", "# Source") for c in r)), None)
if hi is None:
    print("prof_source: no source table in the ncu output; first lines:")
    for r in rows[:5]: print(",".join(r)[:200])
    sys.exit(1)
head = [c.strip() for c in rows[hi]]
src = next(i for i, c in enumerate(head) if c in ("Source", "# Source"))
samp = next((i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All")), None)
if samp is None:
    print("prof_source: no stall-sampling column; columns:", head); sys.exit(1)
stall_cols = [i for i, c in enumerate(head) if c.startswith("stall_") or c.startswith("Stall ")]
def num(s):
    try: return float(s.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hi + 1:] if len(r) == len(head)]
total = sum(num(r[samp]) for r in body) or 1.0
print("prof_source: %d SASS lines, %.0f stall samples" % (len(body), total))
for r in sorted(body, key=lambda r: -num(r[samp]))[:40]:
    why = sorted(((num(r[i]), head[i]) for i in stall_cols), reverse=True)[:3]
    print("%5.1f%%  %-70s %s" % (100 * num(r[samp]) / total, r[src].strip()[:70],
                                 ", ".join("%s %.0f" % (n, v) for v, n in why if v > 0)))
PY
rm -f "$REP.ncu-rep" "$REP.csv"
