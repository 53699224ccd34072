#!/usr/bin/env python3
"""formats_test.py - every file type `minfer synth --quant` writes, end to end on the CPU:

(a) the per-tensor types of a 16-layer tiny model against llama.cpp's rules
    (llama_tensor_get_type in src/llama-quant.cpp, restated below without an
    importance matrix) and general.file_type; where LLAMA_QUANTIZE names a
    llama-quantize binary, also against what it chooses when it requantizes the f16
    file into the same file type, and its bytes against minfer's quantizers run on the
    f16 file's values (build/tools/quant_dump -q);
(b) the tiny model (2 layers) of each type: the last token's logits of a prompt
    against the float64 numpy forward pass over weights dequantized by the `gguf`
    package (llama_oracle.py): scalar reference path within 1e-4 normalised, SIMD
    path (8-bit activations) within 2e-2, argmax equal on both;
(c) greedy decoding (build/tools/greedy_trace, 24 tokens) with each kernel set the CPU
    has (MINFER_CPU_DISABLE: none, avx512-vnni, avx512): identical traces, token ids
    and logits (the sets give the same bits); with the weights read in place
    (repack off: row dots, another summation order) the same tokens.
The scalar path is not held to the SIMD path's tokens: its activations are f32, the
SIMD path's 8-bit, and these random-weight models decide greedy steps by margins of
1e-3 (greedy_trace's runner-up column), below the 8-bit rounding ((b) bounds that).

Prints one "RESULT formats passed=P failed=F skipped=S" line."""
import os
import re
import subprocess
import sys
import tempfile

from tally import Tally

BUILD = os.environ.get("BUILD", "build")
T = Tally("formats")

try:
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from llama_oracle import check_logits
except ImportError as e:
    T.need(f"numpy/gguf not importable ({e}); run tools/deps.sh --test")
    sys.exit(T.result())

# --quant -> (llama_ftype, base type, llama-quantize's name for it)
QUANTS = {
    "q4_k_m": (15, "Q4_K", "Q4_K_M"), "q5_k_m": (17, "Q5_K", "Q5_K_M"), "q6_k": (18, "Q6_K", "Q6_K"),
    "q8_0": (7, "Q8_0", "Q8_0"), "q4_0": (2, "Q4_0", "Q4_0"), "iq4_xs": (30, "IQ4_XS", "IQ4_XS"),
    "q3_k_m": (12, "Q3_K", "Q3_K_M"), "q2_k": (10, "Q2_K", "Q2_K"), "iq4_nl": (25, "IQ4_NL", "IQ4_NL"),
    "f16": (1, "F16", "F16"), "bf16": (32, "BF16", "BF16"),
}


def expected_type(quant, name, n_layer, n_gqa):
    """llama.cpp's choice for a llama-shaped model (not 70B, no experts, rows of a
    multiple of 256 values), written from its source independently of cmd_synth.c."""
    base = QUANTS[quant][1]
    if name.endswith("_norm.weight"):
        return "F32"
    if base in ("F16", "BF16"):
        return base
    m = re.match(r"blk\.(\d+)\.", name)
    i = int(m.group(1)) if m else 0
    more = i < n_layer // 8 or i >= 7 * n_layer // 8 or (i - n_layer // 8) % 3 == 2
    if name == "output.weight":
        return "Q8_0" if base == "Q8_0" else "Q6_K"
    if "attn_v.weight" in name:
        if quant == "q2_k":
            return "Q4_K" if n_gqa >= 4 else "Q3_K"
        if quant == "q3_k_m":
            return "Q5_K" if i < 2 else "Q4_K"
        if quant in ("iq4_xs", "iq4_nl") and n_gqa >= 4:
            return "Q5_K"
        if quant in ("q4_k_m", "q5_k_m") and more:
            return "Q6_K"
    if "ffn_down" in name:
        if quant == "q2_k":
            return "Q3_K"
        if quant == "q3_k_m":
            return "Q5_K" if i < n_layer // 16 else "Q4_K"
        if quant in ("q4_k_m", "q5_k_m") and more:
            return "Q6_K"
        if quant in ("iq4_xs", "iq4_nl") and i < n_layer // 8:
            return "Q5_K"
    if "attn_output.weight" in name:
        if quant == "q2_k":
            return "Q3_K"
        if quant == "q3_k_m":
            return "Q4_K"
    return base


def synth(tmp, quant, layers, tag=""):
    path = os.path.join(tmp, f"{quant}{tag}.gguf")
    cmd = [f"{BUILD}/minfer", "synth", "--shape", "tiny", "--quant", quant, "-o", path]
    if layers:
        cmd += ["--layers", str(layers)]
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode:
        T.check(False, f"synth {quant}: exit {r.returncode}: {r.stderr.decode(errors='replace').strip()}")
        return None
    return path


def types_of(path):
    r = GGUFReader(path)
    ft = int(r.fields["general.file_type"].contents())
    return ft, {t.name: t.tensor_type.name for t in r.tensors}


def check_mix(tmp, quant):
    path = synth(tmp, quant, 16, "_16")
    if not path:
        return
    ft, types = types_of(path)
    T.check(ft == QUANTS[quant][0], f"{quant}: general.file_type {ft}, want {QUANTS[quant][0]}")
    bad = [f"{n} {t} (want {expected_type(quant, n, 16, 2)})" for n, t in types.items()
           if t != expected_type(quant, n, 16, 2)]
    T.check(not bad, f"{quant} 16 layers: tensor types as llama.cpp's rules: {bad[:4]}")
    q = os.environ.get("LLAMA_QUANTIZE")
    if not q:
        return
    f16 = synth(tmp, "f16", 16, "_16")
    out = os.path.join(tmp, f"{quant}_llama.gguf")
    r = subprocess.run([q, "--allow-requantize", f16, out, QUANTS[quant][2]], capture_output=True)
    if not T.check(r.returncode == 0, f"{quant}: llama-quantize exit {r.returncode}"):
        return
    ft2, theirs = types_of(out)
    diff = [f"{n} {types[n]} (llama-quantize {theirs.get(n)})" for n in types if theirs.get(n) != types[n]]
    T.check(ft2 == ft and not diff, f"{quant}: synth's types == llama-quantize's (file_type {ft} / {ft2}): {diff[:4]}")
    # and its bytes: minfer's quantizer (quant_dump -q) on the f16 file's values
    src = {t.name: t for t in GGUFReader(f16).tensors}
    bad = []
    for t in GGUFReader(out).tensors:
        if t.tensor_type.name in ("F32", "F16", "BF16"):
            continue
        x = dequantize(src[t.name].data, src[t.name].tensor_type).astype(np.float32)
        r = subprocess.run([f"{BUILD}/tools/quant_dump", "-q", str(int(t.tensor_type))], input=x.tobytes(),
                           capture_output=True)
        if r.returncode or r.stdout != np.ascontiguousarray(t.data).tobytes():
            bad.append(f"{t.name} ({t.tensor_type.name})")
    T.check(not bad, f"{quant}: minfer's quantizers give llama-quantize's bytes from the f16 values: {bad[:4]}")


def trace(path, disable):
    env = dict(os.environ, MINFER_CPU_DISABLE=disable)
    r = subprocess.run([f"{BUILD}/tools/greedy_trace", path, "Once upon a time", "24", "cpu"], capture_output=True,
                       env=env)
    if r.returncode:
        raise RuntimeError(f"greedy_trace ({disable or 'nothing'} off): {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode()


def check_model(tmp, quant):
    path = synth(tmp, quant, 0)
    if not path:
        return
    check_logits(T, path, "Once upon a time, in a small village by the sea, there lived", f"{quant} tiny")
    try:
        base = trace(path, "")
        sets = {d: trace(path, d) for d in ("avx512-vnni", "avx512")}
        rows = trace(path, "repack")
    except RuntimeError as e:
        T.check(False, f"{quant}: {e}")
        return
    tokens = lambda t: [line.split("\t")[1] for line in t.splitlines()]
    T.check(len(tokens(base)) > 0 and all(s == base for s in sets.values()),
            f"{quant}: greedy traces identical with avx512-vnni / avx512 off")
    T.check(tokens(rows) == tokens(base), f"{quant}: the same greedy tokens with repack off (row dots)")


def main():
    if not (os.access(f"{BUILD}/minfer", os.X_OK) and os.access(f"{BUILD}/tools/greedy_trace", os.X_OK)):
        T.check(False, f"{BUILD}/minfer or {BUILD}/tools/greedy_trace not built")
        return T.result()
    if not os.environ.get("LLAMA_QUANTIZE"):
        T.skip("LLAMA_QUANTIZE unset: the mixes are checked against the rules written here, not llama-quantize")
    with tempfile.TemporaryDirectory() as tmp:
        for quant in QUANTS:
            check_mix(tmp, quant)
            check_model(tmp, quant)
    return T.result()


if __name__ == "__main__":
    sys.exit(main())
