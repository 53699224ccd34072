#!/usr/bin/env python3
"""forward_oracle_test.py - the CPU forward pass against an independent oracle: a
float64 numpy implementation of the llama forward pass over weights dequantized by
the `gguf` PyPI package. Checks the last token's logits of a prompt, on the scalar
reference path (MINFER_CPU_DISABLE=avx2) and on the SIMD path, for stories260K (f32) and
the default real model (SmolLM2-135M: q4_1/q8_0, GQA, tied output) when present.

Bounds: scalar reference (f32 weights-dequant, f32 activations): normalised max
error < 1e-4; SIMD path (activations quantized to 8 bits, like llama.cpp): < 2e-2."""
import os, sys

from tally import Tally

SHARED = os.environ.get("MINFER_SHARED", "../shared")
T = Tally("forward_oracle")

def result():
    sys.exit(T.result())

try:
    from llama_oracle import check_logits
except ImportError as e:
    T.need(f"numpy/gguf not importable ({e}); run tools/deps.sh --test")
    result()

models = [f"{SHARED}/models/stories260K.gguf", "models/SmolLM2-135M-Instruct.Q4_1.gguf"]
prompt = "Once upon a time, in a small village by the sea, there lived"
for path in models:
    if not os.path.exists(path):
        T.skip(f"{path} absent")
        continue
    check_logits(T, path, prompt, os.path.basename(path))
result()
