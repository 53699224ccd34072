#!/usr/bin/env bash
# bench/cpu_shared.sh - decode (and prefill) on a shared machine: `minfer bench` with 0, 1
# and 2 busy processes (`yes >/dev/null`, started and stopped here) beside it, for one
# or two binaries in turn (A B A B ..., so both see the same background), at the
# default thread count and at -t 1. Issue 32: a user's machine always runs something
# else.
#   bench/cpu_shared.sh MODEL [ROUNDS] [BIN_A] [BIN_B]
set -u
MODEL=${1:?model}
ROUNDS=${2:-3}
A=${3:-build/minfer}
B=${4:-}
PN=${PN:--p 0 -n 64}
BUSY=()
stop_busy() { for p in "${BUSY[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; BUSY=(); }
trap stop_busy EXIT
one() { # bin threads-args -> "tg64 mean +- sd"
    "$1" bench -m "$MODEL" $PN -r 3 $2 --device cpu -o json 2>/dev/null |
        python3 -c 'import json,sys; print(" ".join("%s %.1f+-%.1f" % (x["test"], x["avg_ts"], x["stddev_ts"]) for x in json.load(sys.stdin)))'
}
echo "# $(date -u '+%F %H:%M') $(nproc) cores, model $MODEL, $PN, rounds $ROUNDS"
for busy in 0 1 2; do
    stop_busy
    for _ in $(seq "$busy"); do yes >/dev/null & BUSY+=($!); done
    sleep 0.5
    for r in $(seq "$ROUNDS"); do
        for bin in $A $B; do
            for t in "" "-t 1"; do
                echo "busy=$busy round=$r $bin ${t:--t default}: $(one "$bin" "$t") | load $(cut -d' ' -f1 /proc/loadavg)"
            done
        done
    done
done
