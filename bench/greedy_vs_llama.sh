#!/usr/bin/env bash
# bench/greedy_vs_llama.sh MODEL [N] [DEVICE] - minfer's greedy output against llama.cpp's
# llama-simple (LLAMA_BIN, default /tmp/llama.cpp/build/bin) on three prompts: N tokens
# (default 64) each; prints, per prompt, whether the texts agree and, where they do not,
# the first divergent token and minfer's top-2 margin there (logit of its top-1 minus its
# runner-up: a small margin means a near-tie that rounding can flip). Needs
# $BUILD/tools/greedy_trace (make BUILD=... $BUILD/tools/greedy_trace).
set -euo pipefail
MODEL=$1
N=${2:-64}
DEV=${3:-cpu}
BUILD=${BUILD:-build}
LLAMA_BIN=${LLAMA_BIN:-/tmp/llama.cpp/build/bin}
TRACE="$BUILD/tools/greedy_trace"
[ -x "$TRACE" ] || { echo "greedy_vs_llama: $TRACE missing" >&2; exit 1; }
[ -x "$LLAMA_BIN/llama-simple" ] || { echo "greedy_vs_llama: $LLAMA_BIN/llama-simple missing" >&2; exit 1; }
PROMPTS=("The capital of France is" "Once upon a time, in a small village by the sea," $'def fibonacci(n):\n')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
i=0
for P in "${PROMPTS[@]}"; do
    i=$((i + 1))
    "$TRACE" "$MODEL" "$P" "$N" "$DEV" > "$TMP/mf.$i" 2> "$TMP/mf.err" || { cat "$TMP/mf.err" >&2; exit 1; }
    "$LLAMA_BIN/llama-simple" -m "$MODEL" -n "$N" "$P" > "$TMP/ll.$i" 2> /dev/null
    python3 - "$P" "$TMP/mf.$i" "$TMP/ll.$i" <<'PY'
import ast, sys
prompt, mf, ll = sys.argv[1], sys.argv[2], open(sys.argv[3], encoding="utf-8", errors="replace").read()
rows = []
for line in open(mf, encoding="utf-8"):
    f = line.rstrip("\n").split("\t")
    piece = ast.literal_eval("b" + f[6]).decode("utf-8", errors="replace")
    rows.append((int(f[0]), int(f[1]), float(f[5]), int(f[3]), piece))
k = ll.find(prompt)
ll_gen = ll[k + len(prompt):] if k >= 0 else ll
ll_gen = ll_gen.rstrip("\n")
mf_gen = "".join(r[4] for r in rows)
# the first differing character, then the minfer token that holds it
d = next((j for j in range(min(len(mf_gen), len(ll_gen))) if mf_gen[j] != ll_gen[j]), None)
if d is None and len(mf_gen) != len(ll_gen) and min(len(mf_gen), len(ll_gen)) < max(len(mf_gen), len(ll_gen)):
    d = min(len(mf_gen), len(ll_gen))
    # one stopped earlier (end of generation) or the trailing newline llama-simple adds
    if abs(len(mf_gen) - len(ll_gen)) <= 1: d = None
show = repr(prompt)[:40]
if d is None:
    print(f"{show}: {len(rows)} tokens identical to llama.cpp (min top-2 margin {min(r[2] for r in rows):.4f} at step {min(rows, key=lambda r: r[2])[0]})")
else:
    pos = 0
    for r in rows:
        if pos + len(r[4]) > d: break
        pos += len(r[4])
    print(f"{show}: first divergence at minfer token {r[0]} of {len(rows)} (char {d}): minfer {r[4]!r} (id {r[1]}), "
          f"llama.cpp {ll_gen[pos:pos + max(8, len(r[4]))]!r}...; minfer's top-2 margin there {r[2]:.4f} (runner-up id {r[3]})")
PY
done
