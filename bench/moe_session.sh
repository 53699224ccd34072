#!/usr/bin/env bash
# bench/moe_session.sh PART... - issue 51's device work, in the staged tree
# (tools/stage_device.sh, `bash tools/device_session.sh unpack` first):
#   tests    the experts' GPU tests alone (run_cuda.sh's experts section, quicker than the
#            whole suite): tiny-moe and tiny-mixtral q4_k_m against the CPU (decode on the
#            grouped GEMVs, a 200-token prefill on the grouped MMQ, the composed blocks),
#            several sequences together vs alone, and stories260K as qwen3moe / Mixtral
#            (tests/variants_oracle_test.py's files, staged in .device/models/rope) greedy on
#            the GPU beside the CPU
#   mbench   minfer on the qwen3-30b-a3b synth (made with --fast where absent): bench -p
#            512,2048 -n 128 -r 2, and -p 16 -n 32 -s 1,8,32 -r 1
#   lbench   llama.cpp on the same file (tools/llama_device.sh's build): llama-bench -p 512,2048
#            -n 128 -fa 1 -ub 512,2048 -r 2, llama-batched-bench -npp 16 -ntg 32 -npl 1,8,32
#            (bench/vs_llama_cuda.sh moe runs both parts)
#   profile  one decode step's and one 512-token prefill's launches (MINFER_CUDA_PROFILE=1)
#   oracle   llama.cpp's CPU continuations of the staged mixtral variant (llama-completion
#            -ngl 0, as tests/fixtures/variants/make.sh) into $OUT
# Logs and results in $OUT (default /tmp).
set -u
D=.device
export LD_LIBRARY_PATH=$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$D/b/minfer
T=$D/b/tests/cuda
OUT=${OUT:-/tmp}
TMP=$(mktemp -d)
for part in "$@"; do
    case "$part" in
    tests)
        for sh in tiny-moe tiny-mixtral; do
            "$BIN" synth --shape $sh --quant q4_k_m -o "$TMP/$sh.gguf" >/dev/null 2>&1
            [ -x "$T/test_cuda_moe" ] && { echo "== moe kernels $sh"; "$T/test_cuda_moe" "$TMP/$sh.gguf" 2>&1 | grep -E 'RESULT|FAIL|ffn|route' | tail -n 30; }
            echo "== forward $sh (70 + 40)"; "$T/test_cuda_forward" "$TMP/$sh.gguf" 70 40 0.35 2>&1 | tail -n 4
            echo "== forward $sh f32 both sides"; MINFER_CPU_DISABLE=all MINFER_CUDA_DISABLE=q8,mmq "$T/test_cuda_forward" "$TMP/$sh.gguf" 70 16 0.003 2>&1 | tail -n 4
            echo "== forward $sh (200 + 8, census)"
            MINFER_CENSUS=1 "$T/test_cuda_forward" "$TMP/$sh.gguf" 200 8 0.35 2>&1 | grep -E 'RESULT|FAIL|census|diverge' | tail -n 4
            echo "== forward $sh composed"; MINFER_CUDA_DISABLE=fused "$T/test_cuda_forward" "$TMP/$sh.gguf" 70 16 0.35 2>&1 | tail -n 2
        done
        echo "== batch tiny-moe"; "$T/test_cuda_batch" "$TMP/tiny-moe.gguf" 32 0.15 1,2,4,8,16,32,64 2>&1 | tail -n 6
        for v in qwen3moe mixtral; do
            m=$D/models/rope/$v.gguf
            [ -f "$m" ] || continue
            for dev in cpu cuda; do
                "$BIN" run -m "$m" -p "Once upon a time, there was a" -n 64 --temp 0 --raw --device $dev 2>/dev/null >"$TMP/$v.$dev"
            done
            cmp -s "$TMP/$v.cpu" "$TMP/$v.cuda" && echo "ok $v: GPU greedy 64 = CPU" || { echo "DIFF $v:"; cat "$TMP/$v.cpu"; echo; cat "$TMP/$v.cuda"; echo; }
        done
        ;;
    mbench)
        m=${SYNTH_DIR:-/tmp}/minfer-qwen3-30b-a3b-q4_k_m.gguf
        [ -s "$m" ] || "$BIN" synth --shape qwen3-30b-a3b --quant q4_k_m --fast -o "$m" >/dev/null 2>&1
        echo "== qwen3-30b-a3b q4_k_m synth: minfer ($(du -h "$m" | cut -f1))"
        "$BIN" bench -m "$m" -p 512,2048 -n 128 -r ${MB_R:-2} --device cuda 2>&1 | grep -E '^\||minfer/cuda: NVIDIA|rror'
        "$BIN" bench -m "$m" -p 16 -n 32 -s 1,8,32 -r 1 --device cuda 2>&1 | grep -E '^\||rror'
        echo "== a 32k context (the issue's fit on an 80 GB card): the notice's memory line"
        "$BIN" bench -m "$m" -p 512 -n 0 -c 32768 -r 1 --device cuda 2>&1 | grep -oE 'mem weights.*|^\|.*pp512.*|rror.*'
        ;;
    lbench)
        m=${SYNTH_DIR:-/tmp}/minfer-qwen3-30b-a3b-q4_k_m.gguf
        LB=$(bash tools/llama_device.sh bin) || { echo "no llama.cpp build yet"; continue; }
        export LD_LIBRARY_PATH="$LB:$LD_LIBRARY_PATH"
        echo "== qwen3-30b-a3b q4_k_m synth: llama.cpp $(cat /tmp/llama/src/LLAMA_REV 2>/dev/null)"
        "$LB/llama-bench" -m "$m" -p 512,2048 -n 128 -fa 1 -ub 512,2048 -r ${LB_R:-2} -ngl 99 2>&1 | grep -E '^\|'
        "$LB/llama-batched-bench" -m "$m" -c 8192 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 1,8,32 -fa 1 -ngl 99 2>&1 | grep -E '^\|'
        ;;
    profile)
        m=${SYNTH_DIR:-/tmp}/minfer-qwen3-30b-a3b-q4_k_m.gguf
        echo "== decode profile (graph off: eager launches)"; MINFER_CUDA_PROFILE=1 MINFER_CUDA_DISABLE=graph "$BIN" bench -m "$m" -p 0 -n 32 -r 1 2>&1 | grep -vE '^\||^minfer: ' | head -n 30
        echo "== prefill profile"; MINFER_CUDA_PROFILE=1 "$BIN" bench -m "$m" -p 512 -n 0 -r 1 2>&1 | grep -vE '^\||^minfer: ' | head -n 30
        ;;
    oracle)
        LB=$(bash tools/llama_device.sh bin) || { echo "no llama.cpp build"; continue; }
        export LD_LIBRARY_PATH="$LB:$LD_LIBRARY_PATH"
        for p in prompt1k prompt4k; do
            for kv in f32 f16; do
                sfx=$([ $kv = f32 ] && echo out || echo f16kv.out)
                "$LB/llama-completion" -m $D/models/rope/mixtral.gguf -f tests/fixtures/variants/$p.txt -n 46 --temp 0 \
                    -c 4096 -ctk $kv -ctv $kv -fa off -no-cnv --no-display-prompt -t 2 -ngl 0 >"$OUT/mixtral.$p.$sfx" 2>"$TMP/log" ||
                    tail -n 5 "$TMP/log"
            done
        done
        ls -la "$OUT"/mixtral.*
        ;;
    esac
done
rm -rf "$TMP"
