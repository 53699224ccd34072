"""llama_oracle.py - an independent llama forward pass for the tests: float64 numpy over
weights dequantized by the `gguf` PyPI package (gguf.quants), and minfer's side of the
comparison (its tokenizer, and the last token's logits from build/tools/logits_dump).
Used by forward_oracle_test.py and formats_test.py; needs numpy and gguf."""
import os
import subprocess

import gguf
import numpy as np
from gguf.quants import dequantize

BUILD = os.environ.get("BUILD", "build")


def oracle_logits(path, ids):
    r = gguf.GGUFReader(path)
    W = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        W[t.name] = a.reshape(-1, int(t.shape[0])) if len(t.shape) > 1 else a.reshape(-1)
    f = lambda k: r.fields[k].contents()
    dim = f("llama.embedding_length"); nl = f("llama.block_count"); nh = f("llama.attention.head_count")
    nkv = f("llama.attention.head_count_kv") if "llama.attention.head_count_kv" in r.fields else nh
    eps = f("llama.attention.layer_norm_rms_epsilon")
    base = f("llama.rope.freq_base") if "llama.rope.freq_base" in r.fields else 10000.0
    hd = dim // nh
    T = len(ids)
    x = W["token_embd.weight"][ids]
    rms = lambda v, w: v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
    def rope(v, heads):  # llama "normal" mode: adjacent pairs
        v = v.reshape(T, heads, hd).copy()
        i = np.arange(hd // 2)
        th = np.arange(T)[:, None] * base ** (-2.0 * i / hd)
        c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
        a, b = v[..., 0::2].copy(), v[..., 1::2].copy()
        v[..., 0::2], v[..., 1::2] = a * c - b * s, a * s + b * c
        return v
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(nl):
        g = lambda n: W[f"blk.{l}.{n}"]
        h = rms(x, g("attn_norm.weight"))
        q = rope(h @ g("attn_q.weight").T, nh)
        k = rope(h @ g("attn_k.weight").T, nkv)
        v = (h @ g("attn_v.weight").T).reshape(T, nkv, hd)
        out = np.zeros((T, nh, hd))
        for hh in range(nh):
            kh = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kh].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (p / p.sum(-1, keepdims=True)) @ v[:, kh]
        x = x + out.reshape(T, -1) @ g("attn_output.weight").T
        h = rms(x, g("ffn_norm.weight"))
        a, b = h @ g("ffn_gate.weight").T, h @ g("ffn_up.weight").T
        x = x + ((a / (1 + np.exp(-a))) * b) @ g("ffn_down.weight").T
    out_w = W.get("output.weight", W["token_embd.weight"])
    return rms(x[-1], W["output_norm.weight"]) @ out_w.T

def tokenize(path, text):
    r = subprocess.run([f"{BUILD}/minfer", "tokenize", "-m", path], input=text.encode(), capture_output=True)
    return [int(t) for t in r.stdout.split()]

def minfer_logits(path, ids, simd):
    env = dict(os.environ, MINFER_CPU_DISABLE="" if simd else "avx2")
    r = subprocess.run([f"{BUILD}/tools/logits_dump", path, "cpu"] + [str(i) for i in ids], capture_output=True, env=env)
    if r.returncode:
        raise RuntimeError(r.stderr.decode())
    return np.frombuffer(r.stdout, dtype=np.float32).astype(np.float64)


def check_logits(T, path, prompt, label):
    """The last token's logits of prompt on minfer's scalar reference path and its SIMD
    path against the oracle, counted on the Tally T: normalised max error below 1e-4
    (scalar: f32 activations) and 2e-2 (SIMD: 8-bit activations, like llama.cpp), and
    the same argmax."""
    ids = tokenize(path, prompt)
    ref = oracle_logits(path, ids)
    scale = np.abs(ref).max()
    for simd, bound in ((False, 1e-4), (True, 2e-2)):
        what = f"{label} {'simd' if simd else 'scalar'}"
        try:
            got = minfer_logits(path, ids, simd)
        except RuntimeError as e:
            T.check(False, f"{what}: {e}")
            continue
        err = np.abs(got - ref).max() / scale
        top = "matches" if int(np.argmax(got)) == int(np.argmax(ref)) else "differs"
        print(f"  {what}: {len(ids)} tokens, normalised max error {err:.2e} (bound {bound:g}), argmax {top}")
        T.check(got.shape == ref.shape and err < bound and top == "matches",
                f"{what}: error {err:.2e} (bound {bound:g}), argmax {top}")
