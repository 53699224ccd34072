#!/usr/bin/env bash
# bench/ab_binaries.sh A B [same|speed|all] - two minfer binaries (A: before a change, B:
# after) on the GPU machine, on the 7B and 8B synth (q4_k_m --fast, made in $SYNTH_DIR,
# default /tmp, when absent):
#   same   the same bytes out: 48 greedy tokens after a 20-token prompt and after a
#          600-token one (prefill on the 128+ column GEMMs), and perplexity over 512-token
#          chunks (every scored position's logits in one number, to the 4 decimals it prints);
#          reported: identical or the difference (several sequences a step: tests/run_cuda.sh's
#          test_cuda_batch, within one binary)
#   speed  minfer bench -p 512,3314 -n 128 -r 3 and bench -p 16 -n 32 -s 1,8,32 -r 2, A and B
#          alternated (A, B, A, B): each row's B/A
# Env: SYNTH_DIR.
set -u
A=${1:?usage: ab_binaries.sh A B [same|speed|all]}
B=${2:?usage: ab_binaries.sh A B [same|speed|all]}
PART=${3:-all}
SD=${SYNTH_DIR:-/tmp}
synth() { # SHAPE -> path of the synth q4_k_m model
    local m="$SD/minfer-$1-q4_k_m.gguf"
    [ -s "$m" ] || "$B" synth --shape "$1" --quant q4_k_m --fast -o "$m" >/dev/null 2>&1 || { echo "synth $1 failed" >&2; return 1; }
    echo "$m"
}
M7=$(synth 7b) || exit 1
M8=$(synth 8b) || exit 1
P20="The quick brown fox jumps over the lazy dog while the cat sleeps by the warm fire tonight"
P600=$(for i in $(seq 1 60); do printf 'Sentence %d of a longer prompt, for the prefill GEMMs. ' "$i"; done)
if [ "$PART" != speed ]; then
    printf '%s\n' "$P600" "$P600" "$P600" "$P600" >/tmp/ab_text.txt
    for m in "$M7" "$M8"; do
        for p in P20 P600; do
            for side in A B; do
                bin=$([ $side = A ] && echo "$A" || echo "$B")
                "$bin" run -q -m "$m" -p "${!p}" -n 48 --temp 0 --device cuda >"/tmp/ab_$side.txt" 2>/tmp/ab_err_$side.txt
            done
            if cmp -s /tmp/ab_A.txt /tmp/ab_B.txt; then echo "same $(basename "$m") $p greedy 48: identical ($(wc -c </tmp/ab_A.txt) bytes)"
            else echo "same $(basename "$m") $p greedy 48: DIFFER"; diff /tmp/ab_A.txt /tmp/ab_B.txt | head -4; fi
        done
        # the logits of every scored position summed into one number (prefill, 512-token chunks)
        for side in A B; do
            bin=$([ $side = A ] && echo "$A" || echo "$B")
            "$bin" perplexity -m "$m" -f /tmp/ab_text.txt --ctx 512 --device cuda 2>/dev/null | tail -n 2 >"/tmp/ab_p_$side.txt"
        done
        if cmp -s /tmp/ab_p_A.txt /tmp/ab_p_B.txt; then echo "same $(basename "$m") perplexity: identical: $(tr '\n' ' ' </tmp/ab_p_A.txt)"
        else echo "same $(basename "$m") perplexity: DIFFER: A $(tr '\n' ' ' </tmp/ab_p_A.txt) B $(tr '\n' ' ' </tmp/ab_p_B.txt)"; fi
    done
fi
if [ "$PART" != same ]; then
    for m in "$M7" "$M8"; do
        for round in 1 2; do
            for side in A B; do
                bin=$([ $side = A ] && echo "$A" || echo "$B")
                echo "== $(basename "$m") $side round $round"
                "$bin" bench -m "$m" -p 512,3314 -n 128 -r 3 --device cuda 2>/dev/null | grep -E '^\|' | tail -n 3
                "$bin" bench -m "$m" -p 16 -n 32 -s 1,8,32 -r 2 --device cuda 2>/dev/null | grep -E '^\|' | tail -n 4
            done
        done
    done
fi
