#!/usr/bin/env bash
# tools/run_default.sh - `make run`: fetch the default model and answer one prompt.
set -euo pipefail
BIN=${1:-build/minfer}
MODEL=$(bash tools/fetch_model.sh)
PROMPT=${PROMPT:-"What is the capital of France? Answer in one sentence."}
# SmolLM2-Instruct speaks chatml; --special lets the template's markers be tokens.
printf -v TEXT '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$PROMPT"
echo "minfer: prompt: $PROMPT" >&2
exec "$BIN" run -m "$MODEL" -p "$TEXT" --special -n ${N:-128} --temp 0
