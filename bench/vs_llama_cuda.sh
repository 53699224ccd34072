#!/usr/bin/env bash
# bench/vs_llama_cuda.sh PART... - minfer beside llama.cpp in one run on the GPU machine, on
# the same files (bench/RESULTS.md's same-call rows). llama.cpp's binaries come from
# tools/llama_device.sh (`bin`); the synth models are made in $SYNTH_DIR (default /tmp) when
# absent (`minfer synth --shape S --quant q4_k_m --fast`).
#   pp           8B and 7B synth: minfer bench -p 512,3314 -n 128 -r 2 and
#                llama-bench -p 512,3314 -n 128 -fa 1 -ub 512,2048 -r 2 (both micro-batches:
#                the ratio takes llama.cpp's better one)
#   seqs         7B synth, N sequences decoded together: minfer bench -p 16 -n 32
#                -s 1,2,4,8,16,32,64 -r 1 and llama-batched-bench -npp 16 -ntg 32
#                -npl 1,2,4,8,16,32,64 -c 8192 -b 2048 -ub 512 -fa 1
#   moe          qwen3-30b-a3b synth (128 experts, 8 used; issue 51): minfer bench -p 512,2048
#                -n 128 -r 2, and -p 16 -n 32 -s 1,8,32; llama-bench -p 512,2048 -n 128 -fa 1
#                -ub 512,2048 -r 2 and llama-batched-bench -npl 1,8,32 as seqs
#   real DIR     each .gguf in DIR: minfer bench -p 512 -n 128 -r 3 and llama-bench the same
#                (-fa 1 -ngl 99), then perplexity of texts/emma-ch1.txt at --ctx 512 on the GPU
#                by both tools
# Env: BIN (minfer binary, default .device/b/minfer), LLAMA_BIN (directory of llama.cpp's
# binaries; default `tools/llama_device.sh bin`), SYNTH_DIR.
set -u
BIN=${BIN:-.device/b/minfer}
LB=${LLAMA_BIN:-$(bash tools/llama_device.sh bin 2>/dev/null)}
SD=${SYNTH_DIR:-/tmp}
if [ -z "$LB" ] || [ ! -x "$LB/llama-bench" ]; then
    echo "vs_llama_cuda: no llama.cpp binaries (tools/llama_device.sh unpack or build); minfer rows only"
    LB=
else
    export LD_LIBRARY_PATH="$LB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
synth() { # SHAPE -> path of the synth q4_k_m model
    local m="$SD/minfer-$1-q4_k_m.gguf"
    [ -s "$m" ] || "$BIN" synth --shape "$1" --quant q4_k_m --fast -o "$m" >/dev/null 2>&1 || { echo "synth $1 failed" >&2; return 1; }
    echo "$m"
}
llama() { # TOOL ARGS... (skipped without binaries); llama.cpp's table rows only
    [ -n "$LB" ] || return 0
    "$LB/$1" "${@:2}" 2>&1 | grep -E '^\|' || echo "vs_llama_cuda: $1 failed"
}
for part in "$@"; do
    case "$part" in
    pp)
        for s in 8b 7b; do
            m=$(synth "$s") || continue
            echo "== $s pp: minfer"
            "$BIN" bench -m "$m" -p 512,3314 -n 128 -r 2 --device cuda 2>&1 | grep -E '^\|'
            echo "== $s pp: llama.cpp"
            llama llama-bench -m "$m" -p 512,3314 -n 128 -fa 1 -ub 512,2048 -r 2
        done
        ;;
    seqs)
        m=$(synth 7b) || continue
        echo "== 7b sequences: minfer"
        "$BIN" bench -m "$m" -p 16 -n 32 -s 1,2,4,8,16,32,64 -r 1 --device cuda 2>&1 | grep -E '^\|'
        echo "== 7b sequences: llama.cpp"
        llama llama-batched-bench -m "$m" -c 8192 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 1,2,4,8,16,32,64 -fa 1 -ngl 99
        ;;
    moe)
        m=$(synth qwen3-30b-a3b) || continue
        echo "== qwen3-30b-a3b: minfer ($(du -h "$m" | cut -f1))"
        "$BIN" bench -m "$m" -p 512,2048 -n 128 -r 2 --device cuda 2>&1 | grep -E '^\||minfer/cuda: NVIDIA'
        "$BIN" bench -m "$m" -p 16 -n 32 -s 1,8,32 -r 1 --device cuda 2>&1 | grep -E '^\|'
        echo "== qwen3-30b-a3b: llama.cpp"
        llama llama-bench -m "$m" -p 512,2048 -n 128 -fa 1 -ub 512,2048 -r 2
        llama llama-batched-bench -m "$m" -c 8192 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 1,8,32 -fa 1 -ngl 99
        ;;
    real)
        shift
        dir=${1:?usage: vs_llama_cuda.sh real DIR}
        for m in "$dir"/*.gguf; do
            echo "== $(basename "$m"): minfer"
            "$BIN" bench -m "$m" -p 512 -n 128 -r 3 --device cuda 2>&1 | grep -E '^\|'
            "$BIN" perplexity -m "$m" -f texts/emma-ch1.txt --ctx 512 --device cuda -q 2>&1 | grep -E 'chunks|estimate'
            echo "== $(basename "$m"): llama.cpp"
            llama llama-bench -m "$m" -p 512 -n 128 -r 3 -fa 1 -ngl 99
            [ -n "$LB" ] && "$LB/llama-perplexity" -m "$m" -f texts/emma-ch1.txt -c 512 -ngl 99 -fa on 2>&1 |
                grep -E 'Final estimate|chunks|tokens/s|seconds per pass' | head -n 4
        done
        break
        ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
