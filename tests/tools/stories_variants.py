#!/usr/bin/env python3
"""stories_variants.py - stories260K (f32 weights, a trained llama) rewritten as the files
the tests compare with llama.cpp: each RoPE scaling that llama.cpp reads from a GGUF
(tests/variants_oracle_test.py, fixtures in tests/fixtures/variants/, make.sh there) and other
architectures over the same weights (the same test and fixtures):

  llama3  rope_freqs.weight: Llama 3.1's per-pair factors (factor 8, low/high frequency
          factors 1 and 4, original context 2048: pairs 0..3 get 1, 1, 1.276, 8)
  yarn    rope.scaling.type yarn, factor 4, original_context_length 1024 (ramp over
          pairs 0..3)
  linear  rope.scaling.type linear, factor 2
  unused  llama3 and a tensor no architecture reads (blk.0.attn_sinks.weight)
  badtype rope.scaling.type longrope (which minfer does not implement)
  qwen3   general.architecture qwen3 (neox RoPE), with attn_q_norm / attn_k_norm weights of
          1 + 0.25 * uniform(-1, 1) noise (seeded) per head dim
  qwen3moe  qwen3's attention and an FFN of 4 experts, 2 used a token: expert e's gate/up/down
          the dense ones times 1 + 0.3 * uniform(-1, 1) noise, a router of 0.5 * normal
          noise (seeded)
  mixtral   a llama file with experts as Mixtral's: qwen3moe's FFN (the same noise and
          router) under general.architecture llama, llama.expert_count 4 and
          expert_used_count 2, no expert_feed_forward_length (Mixtral's experts are n_ff wide)

Each keeps the weights and the tokenizer and sets context_length 4096 (the prompts are
up to 4k tokens). Usage: stories_variants.py STORIES260K.gguf OUTDIR -> OUTDIR/NAME.gguf"""
import math, os, sys

import numpy as np
import gguf

VARIANTS = ("llama3", "yarn", "linear", "unused", "badtype", "qwen3", "qwen3moe", "mixtral")


def llama3_factors(dim, base, factor, low, high, orig):
    """Llama 3.1's rope_freqs, as its converter computes them."""
    lo_wl, hi_wl = orig / low, orig / high
    out = []
    for i in range(dim // 2):
        wl = 2 * math.pi / base ** (-2.0 * i / dim)
        if wl < hi_wl:
            out.append(1.0)
        elif wl > lo_wl:
            out.append(factor)
        else:
            s = (orig / wl - low) / (high - low)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def field_value(f):
    return f.contents()


def write_variant(src, name, path):
    r = gguf.GGUFReader(src)
    src_arch = field_value(r.fields["general.architecture"])
    arch = name if name in ("qwen3", "qwen3moe") else src_arch
    w = gguf.GGUFWriter(path, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = field_value(f)
        vt = f.types[0]
        if k.startswith(src_arch + "."):
            k = arch + k[len(src_arch):]
        if k == f"{arch}.context_length":
            v = 4096
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_array(k, v)
        else:
            w.add_key_value(k, v, vt)
    dim = field_value(r.fields[f"{src_arch}.rope.dimension_count"])
    if name in ("llama3", "unused"):
        w.add_tensor("rope_freqs.weight", llama3_factors(dim, 10000.0, 8.0, 1.0, 4.0, 2048))
    elif name == "yarn":
        w.add_string(f"{arch}.rope.scaling.type", "yarn")
        w.add_float32(f"{arch}.rope.scaling.factor", 4.0)
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", 1024)
    elif name == "linear":
        w.add_string(f"{arch}.rope.scaling.type", "linear")
        w.add_float32(f"{arch}.rope.scaling.factor", 2.0)
    elif name in ("qwen3", "qwen3moe", "mixtral"):
        pass
    elif name == "badtype":
        w.add_string(f"{arch}.rope.scaling.type", "longrope")
        w.add_float32(f"{arch}.rope.scaling.factor", 4.0)
    else:
        raise SystemExit(f"unknown variant {name}")
    if name == "unused":
        w.add_tensor("blk.0.attn_sinks.weight", np.zeros(8, dtype=np.float32))
    if name in ("qwen3moe", "mixtral"):
        w.add_uint32(f"{arch}.expert_count", 4)
        w.add_uint32(f"{arch}.expert_used_count", 2)
    if name == "qwen3moe":
        w.add_uint32(f"{arch}.expert_feed_forward_length", field_value(r.fields[f"{src_arch}.feed_forward_length"]))
    if name in ("qwen3", "qwen3moe"):
        rng = np.random.default_rng(7)
        n_layer = field_value(r.fields[f"{src_arch}.block_count"])
        for l in range(n_layer):
            for t in ("attn_q_norm", "attn_k_norm"):
                w.add_tensor(f"blk.{l}.{t}.weight", (1 + 0.25 * rng.uniform(-1, 1, dim)).astype(np.float32))
    rng_e = np.random.default_rng(11)
    for t in r.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise SystemExit(f"{t.name}: {t.tensor_type.name}, want f32")
        shape = [int(x) for x in reversed(t.shape)]
        a = np.asarray(t.data, dtype=np.float32).reshape(shape)
        part = t.name.split(".")
        if name in ("qwen3moe", "mixtral") and len(part) == 4 and part[2] in ("ffn_gate", "ffn_up", "ffn_down"):
            experts = np.stack([a * (1 + 0.3 * rng_e.uniform(-1, 1, a.shape)) for _ in range(4)]).astype(np.float32)
            w.add_tensor(f"blk.{part[1]}.{part[2]}_exps.weight", experts)
            if part[2] == "ffn_gate":
                dim_model = a.shape[1]
                w.add_tensor(f"blk.{part[1]}.ffn_gate_inp.weight", (0.5 * rng_e.standard_normal((4, dim_model))).astype(np.float32))
            continue
        w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for v in VARIANTS:
        write_variant(src, v, os.path.join(out, v + ".gguf"))


if __name__ == "__main__":
    main()
