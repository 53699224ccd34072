#!/usr/bin/env bash
# bench/cpu_shared.sh - decode (and prefill) on a shared machine: `minfer bench` with 0, 1
# and 2 busy processes (`yes >/dev/null`, started and stopped here, each bounded by
# `timeout`) beside it, for one or two binaries and optionally llama.cpp's llama-bench in
# turn (A B llama A B llama ..., so all see the same background), at the default thread
# count (the cores this process may use, `nproc`; llama-bench is given -t $(nproc) since
# its own default counts physical cores) and at -t 1. Issue 32: a user's machine always
# runs something else.
#   bench/cpu_shared.sh MODEL [ROUNDS] [BIN_A] [BIN_B]
# Environment:
#   PN='-p 0 -n 64'   the tests (the same flags mean the same tests to both programs)
#   LLAMA_BENCH=PATH  also run llama-bench (a CPU build) on the same model
#   CPUS=0,1          pin every benchmark and busy process to these CPUs (taskset), to
#                     make "2 cores" on a bigger machine
#   BUSY_MAX_S=1800   the bound on each busy process (it outlives no killed script)
#   LOADS="0 1 2"     the numbers of busy processes to run beside, in order
# Prints one line per run (with the load average), then a table of the median over the
# rounds of each run's mean tok/s.
set -u
MODEL=${1:?usage: bench/cpu_shared.sh MODEL [ROUNDS] [BIN_A] [BIN_B]}
ROUNDS=${2:-3}
A=${3:-build/minfer}
B=${4:-}
PN=${PN:--p 0 -n 64}
LLAMA=${LLAMA_BENCH:-}
BUSY_MAX_S=${BUSY_MAX_S:-1800}
PIN=()
[ -n "${CPUS:-}" ] && PIN=(taskset -c "$CPUS")
[ -f "$MODEL" ] || { echo "cpu_shared.sh: no model file $MODEL" >&2; exit 2; }
for b in $A $B $LLAMA; do [ -x "$b" ] || { echo "cpu_shared.sh: $b is not an executable" >&2; exit 2; }; done
NCPU=$("${PIN[@]}" nproc)
LOG=$(mktemp)
BUSY=()
stop_busy() { for p in "${BUSY[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; BUSY=(); }
trap 'stop_busy; rm -f "$LOG"' EXIT
# one BIN THREADS -> "tg64 mean+-sd ..." (both programs' JSON has test lengths, avg_ts, stddev_ts)
one() {
    local bin=$1 t=$2 out
    if [ "$bin" = "$LLAMA" ]; then
        out=$("${PIN[@]}" "$bin" -m "$MODEL" $PN -r 3 -t "${t:-$NCPU}" -o json 2>/dev/null)
    else
        out=$("${PIN[@]}" "$bin" bench -m "$MODEL" $PN -r 3 ${t:+-t $t} --device cpu -o json 2>/dev/null)
    fi
    python3 -c '
import json, sys
try:
    d = json.loads(sys.argv[1])
except ValueError:
    print("FAILED"); sys.exit(0)
print(" ".join("%s %.1f+-%.1f" % ("pp%d" % x["n_prompt"] if x["n_prompt"] else "tg%d" % x["n_gen"],
                                  x["avg_ts"], x["stddev_ts"]) for x in d))' "$out"
}
echo "# $(date -u '+%F %H:%M') $NCPU cpus${CPUS:+ ($CPUS)}, model $MODEL, $PN, rounds $ROUNDS"
for busy in ${LOADS:-0 1 2}; do
    stop_busy
    for _ in $(seq "$busy"); do "${PIN[@]}" timeout "$BUSY_MAX_S" yes >/dev/null & BUSY+=($!); done
    sleep 0.5
    for r in $(seq "$ROUNDS"); do
        for bin in $A $B $LLAMA; do
            for t in "" 1; do
                line="busy=$busy round=$r $bin -t ${t:-$NCPU}: $(one "$bin" "$t") | load $(cut -d' ' -f1 /proc/loadavg)"
                echo "$line"
                echo "$line" >>"$LOG"
            done
        done
    done
done
stop_busy
# the medians: one row per load, one column per program and thread count, one cell per test
python3 - "$LOG" <<'EOF'
import re, statistics, sys
cells, cols = {}, []
for line in open(sys.argv[1]):
    m = re.match(r"busy=(\d+) round=\d+ (\S+) -t (\d+): (.*) \| load", line)
    if not m:
        continue
    col = "%s -t %s" % (m.group(2), m.group(3))
    if col not in cols:
        cols.append(col)
    for test, ts in re.findall(r"(\w+) ([0-9.]+)\+-", m.group(4)):
        cells.setdefault((int(m.group(1)), col, test), []).append(float(ts))
tests = sorted({k[2] for k in cells})
print("\n| busy | test | " + " | ".join(cols) + " |")
print("|---:|---|" + "---:|" * len(cols))
for busy in sorted({k[0] for k in cells}):
    for test in tests:
        row = [cells.get((busy, c, test)) for c in cols]
        print("| %d | %s | " % (busy, test) + " | ".join(
            "%.1f (%d)" % (statistics.median(v), len(v)) if v else "-" for v in row) + " |")
print("(median over the rounds of each run's mean tok/s; in parentheses the rounds)")
EOF
