#!/usr/bin/env bash
# tools/run_default.sh - `make run`: build minfer, fetch the default model and answer
# one prompt.
#   bash tools/run_default.sh [BIN]   with BIN: run that binary, build nothing
#   bash tools/run_default.sh --plan  print the build `make run` would do, and stop
# The build: CUDA code is compiled only where a GPU can run it. When the Makefile chose
# CUDA=1 by itself (nvcc found) but this machine has no usable GPU (no /dev/nvidia0,
# nothing listed by nvidia-smi -L), it builds CUDA=0 into $BUILD/cpu instead: nvcc
# spent 5 of `make run`'s 5.5 minutes on such a machine compiling three architectures
# it cannot run (issue 32). CUDA=0 or CUDA=1 given to make decides instead.
# Environment (set by the Makefile): BUILD, CUDA, CUDA_ORIGIN (make's $(origin CUDA)).
set -euo pipefail
cd "$(dirname "$0")/.."
gpu_usable() { [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
BIN=
PLAN=0
case "${1:-}" in
--plan) PLAN=1 ;;
"") ;;
*) BIN=$1 ;;
esac
if [ -z "$BIN" ]; then
    B=${BUILD:-build}
    C=${CUDA:-}
    if [ -z "$C" ]; then C=$(command -v "${NVCC:-nvcc}" >/dev/null && echo 1 || echo 0); CUDA_ORIGIN=file; fi
    if [ "$C" = 1 ] && [ "${CUDA_ORIGIN:-file}" = file ] && ! gpu_usable; then
        echo "minfer: nvcc is here but no usable GPU: building without CUDA, into $B/cpu (make run CUDA=1 to build it anyway)" >&2
        B=$B/cpu
        C=0
    fi
    if [ "$PLAN" = 1 ]; then echo "make BUILD=$B CUDA=$C all"; exit 0; fi
    make --no-print-directory BUILD="$B" CUDA="$C" all
    BIN=$B/minfer
fi
MODEL=$(bash tools/fetch_model.sh)
PROMPT=${PROMPT:-"What is the capital of France? Answer in one sentence."}
# run renders the question through SmolLM2's own chat template (its default system
# message, the assistant's turn opened), as a user message.
echo "minfer: prompt: $PROMPT" >&2
exec "$BIN" run -m "$MODEL" -p "$PROMPT" -n ${N:-128} --temp 0
