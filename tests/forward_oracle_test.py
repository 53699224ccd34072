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
    import numpy as np
    from llama_oracle import minfer_logits, oracle_logits, tokenize
except ImportError as e:
    T.need(f"numpy/gguf not importable ({e}); run tools/deps.sh --test")
    result()

models = [f"{SHARED}/models/stories260K.gguf", "models/SmolLM2-135M-Instruct.Q4_1.gguf"]
prompt = "Once upon a time, in a small village by the sea, there lived"
for path in models:
    if not os.path.exists(path):
        T.skip(f"{path} absent")
        continue
    ids = tokenize(path, prompt)
    ref = oracle_logits(path, ids)
    scale = np.abs(ref).max()
    for simd, bound in ((False, 1e-4), (True, 2e-2)):
        try:
            got = minfer_logits(path, ids, simd)
        except RuntimeError as e:
            T.check(False, f"{path}: {e}")
            continue
        err = np.abs(got - ref).max() / scale
        ok = got.shape == ref.shape and err < bound
        top_ok = int(np.argmax(got)) == int(np.argmax(ref))
        print(f"  {os.path.basename(path)} {'simd' if simd else 'scalar'}: {len(ids)} tokens, "
              f"normalised max error {err:.2e} (bound {bound:g}), argmax {'matches' if top_ok else 'differs'}")
        T.check(ok and top_ok, f"{os.path.basename(path)} {'simd' if simd else 'scalar'}: error {err:.2e} "
                f"(bound {bound:g}), argmax {'matches' if top_ok else 'differs'}")
result()
