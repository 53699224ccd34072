#!/usr/bin/env python3
"""quant_oracle_test.py - quant.c against an independent implementation: the
numpy (de)quantizers of the `gguf` Python package (gguf.quants), driven through
build/tools/quant_dump.

(a) Random blocks of every supported weight type: random bytes for the quants,
    random but finite f16 scales (random raw f16/bf16/f32 bit patterns, NaN and
    inf included, for the float types). Our dequantization must be BIT-EXACT:
    quant.c evaluates each value with the same float32 operations in the same
    order as both ggml and gguf.quants (e.g. q4_K is (d*sc)*q - dmin*m; one
    rounding per operation, no fused multiply-add on either side), so any
    difference, even one ulp, is a real disagreement about the format. NaNs
    compare equal to NaNs (payload quieting is allowed to differ).
(b) Quantization of random f32 rows for the types gguf.quants can quantize
    (q4_0, q4_1, q5_0, q5_1, q8_0, f16, bf16): byte-exact, since both follow
    ggml's reference quantizers. (The K-quants and the IQ4 types have no Python
    quantizer; their byte-exactness against ggml is pinned by the golden hashes
    in test_quant.c.)
(c) Every tensor of real models: ../shared/models/stories260K.gguf,
    models/SmolLM2-135M-Instruct.Q4_1.gguf when present, and any *.gguf named in
    MINFER_ORACLE_MODELS (colon-separated). Bit-exact as in (a).

Prints one "RESULT quant_oracle passed=P failed=F skipped=S" line. Without
numpy/gguf it prints a SKIP reason and counts one skip. BUILD (default build)
locates $BUILD/tools/quant_dump.
"""
import os
import subprocess
import sys
import time

from tally import Tally

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = Tally("quant_oracle")
check, skip, result = T.check, T.skip, T.result

try:
    import numpy as np
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFReader
    from gguf import quants as gq
except Exception as e:  # noqa: BLE001 - any import failure means "not installed here"
    T.need(f"numpy/gguf not importable ({e.__class__.__name__}: {e}); run tools/deps.sh --test")
    sys.exit(result())

BUILD = os.environ.get("BUILD", "build")
TOOL = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "tools", "quant_dump")

# type id -> (values per block, bytes per block, byte offsets of f16 scale fields)
TYPES = {
    QT.F32: (1, 4, None),
    QT.F16: (1, 2, None),
    QT.BF16: (1, 2, None),
    QT.Q4_0: (32, 18, [0]),
    QT.Q4_1: (32, 20, [0, 2]),
    QT.Q5_0: (32, 22, [0]),
    QT.Q5_1: (32, 24, [0, 2]),
    QT.Q8_0: (32, 34, [0]),
    QT.Q4_K: (256, 144, [0, 2]),
    QT.Q5_K: (256, 176, [0, 2]),
    QT.Q6_K: (256, 210, [208]),
    QT.Q2_K: (256, 84, [80, 82]),
    QT.Q3_K: (256, 110, [108]),
    QT.IQ4_NL: (32, 18, [0]),
    QT.IQ4_XS: (256, 136, [0]),
}
QUANTIZABLE = [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0]


def run_tool(args, data):
    p = subprocess.run([TOOL] + args, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError(f"quant_dump {' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace').strip()}")
    return p.stdout


def compare_f32(ours, theirs, what):
    """Bit-exact comparison; NaN == NaN. Prints the first difference."""
    ours = np.ascontiguousarray(ours, dtype=np.float32).ravel()
    theirs = np.ascontiguousarray(theirs, dtype=np.float32).ravel()
    if ours.size != theirs.size:
        return check(False, f"{what}: {ours.size} values, oracle {theirs.size}")
    same = ours.view(np.uint32) == theirs.view(np.uint32)
    same |= np.isnan(ours) & np.isnan(theirs)
    if same.all():
        return check(True, what)
    bad = np.flatnonzero(~same)
    i = bad[0]

    def ordered(v):  # float bits -> integers ordered like the floats (+0 == -0)
        b = int(np.float32(v).view(np.int32))
        return b if b >= 0 else -(b & 0x7FFFFFFF)
    ulp = abs(ordered(ours[i]) - ordered(theirs[i]))
    return check(False, f"{what}: {bad.size} of {ours.size} values differ; first at {i}: "
                        f"ours {ours[i]!r} oracle {theirs[i]!r} ({ulp} ulp)")


def sane_f16(rng, n):
    """Finite f16 scales over a wide range, both signs, some subnormal/zero."""
    mag = 10.0 ** rng.uniform(-7, 2, n)
    v = (rng.choice([-1.0, 1.0], n) * mag).astype(np.float16)
    v[rng.random(n) < 0.02] = 0
    return v


# ---------------------------------------------------------------------------
# (a) random blocks
# ---------------------------------------------------------------------------
def test_random_blocks(rng):
    for qt, (blck, tsize, f16_offs) in TYPES.items():
        nblocks = int(rng.integers(200, 600))
        raw = rng.integers(0, 256, size=(nblocks, tsize), dtype=np.uint8)
        if f16_offs is not None:
            for off in f16_offs:
                raw[:, off:off + 2] = sane_f16(rng, nblocks).view(np.uint8).reshape(nblocks, 2)
        elif qt == QT.F32:
            # Mostly sane values plus random bit patterns (NaN, inf, subnormals).
            vals = rng.standard_normal(nblocks).astype(np.float32)
            pick = rng.random(nblocks) < 0.5
            vals.view(np.uint32)[pick] = rng.integers(0, 2**32, size=int(pick.sum()), dtype=np.uint32)
            raw = vals.view(np.uint8).reshape(nblocks, 4)
        try:
            ours = np.frombuffer(run_tool([str(int(qt))], raw.tobytes()), dtype="<f4")
        except RuntimeError as e:
            check(False, f"random {qt.name}: {e}")
            continue
        theirs = gq.dequantize(raw.reshape(-1) if blck == 1 else raw, qt)
        compare_f32(ours, theirs, f"random {qt.name} blocks ({nblocks}) dequantize")


# ---------------------------------------------------------------------------
# (b) quantizers of the 32-blocks
# ---------------------------------------------------------------------------
def test_quantize(rng):
    for qt in QUANTIZABLE:
        blck = TYPES[qt][0]
        rows = []
        for dist in range(5):
            n = 32 * int(rng.integers(1, 64))
            if dist == 0:
                x = rng.standard_normal(n)
            elif dist == 1:
                x = 0.02 * rng.standard_normal(n)
            elif dist == 2:
                x = rng.uniform(0, 1, n)
            elif dist == 3:  # wide dynamic range: f16 subnormals and overflow
                x = rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-9, 5.5, n)
            else:  # exact small integers: ties for the round-half rules
                x = rng.integers(-20, 20, n) * 0.5
            rows.append(x.astype(np.float32))
        x = np.concatenate(rows)
        assert x.size % blck == 0
        try:
            ours = run_tool(["-q", str(int(qt))], x.tobytes())
        except RuntimeError as e:
            check(False, f"quantize {qt.name}: {e}")
            continue
        with np.errstate(all="ignore"):  # the wide-range rows overflow f16 on purpose
            theirs = gq.quantize(x, qt)
        theirs = np.ascontiguousarray(theirs).view(np.uint8).tobytes()
        if ours == theirs:
            check(True, f"quantize {qt.name}")
        else:
            a = np.frombuffer(ours, np.uint8)
            b = np.frombuffer(theirs, np.uint8)
            if a.size != b.size:
                check(False, f"quantize {qt.name}: {a.size} bytes, oracle {b.size}")
            else:
                d = np.flatnonzero(a != b)
                check(False, f"quantize {qt.name}: {d.size} of {a.size} bytes differ; first at byte {d[0]} "
                             f"(block {d[0] // TYPES[qt][1]}): ours {a[d[0]]:#04x} oracle {b[d[0]]:#04x}")


# ---------------------------------------------------------------------------
# (c) real models
# ---------------------------------------------------------------------------
def test_model(path):
    t0 = time.time()
    try:
        reader = GGUFReader(path)
    except Exception as e:  # noqa: BLE001
        check(False, f"{path}: gguf.GGUFReader failed: {e}")
        return
    ours_ok, todo = [], []
    for t in reader.tensors:
        if t.tensor_type in TYPES:
            todo.append(t)
        else:
            skip(f"{os.path.basename(path)}: {t.name}: type {t.tensor_type.name} not supported by minfer")
    if not todo:
        return
    # One quant_dump process streams all tensors back to back, so memory stays
    # at one tensor at a time.
    proc = subprocess.Popen([TOOL, "-g", path] + [t.name for t in todo], stdout=subprocess.PIPE)
    n_bad = 0
    for t in todo:
        n = int(t.n_elements)
        buf = proc.stdout.read(4 * n)
        if len(buf) != 4 * n:
            check(False, f"{os.path.basename(path)}: {t.name}: quant_dump wrote {len(buf)} of {4 * n} bytes")
            n_bad += 1
            continue
        ours = np.frombuffer(buf, dtype="<f4")
        theirs = gq.dequantize(t.data, t.tensor_type)
        if not compare_f32(ours, theirs, f"{os.path.basename(path)}: {t.name} ({t.tensor_type.name}, {n} values)"):
            n_bad += 1
    proc.stdout.close()
    rc = proc.wait()
    check(rc == 0, f"{os.path.basename(path)}: quant_dump -g exit {rc}")
    types = sorted({t.tensor_type.name for t in todo})
    print(f"  {os.path.basename(path)}: {len(todo) - n_bad}/{len(todo)} tensors bit-exact "
          f"({', '.join(types)}), {time.time() - t0:.1f} s")


def main():
    if not os.access(TOOL, os.X_OK):
        check(False, f"{TOOL} not built (make {os.path.relpath(TOOL, ROOT)})")
        return result()
    rng = np.random.default_rng(20260829)
    test_random_blocks(rng)
    test_quantize(rng)

    models = [os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")]
    smol = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    extra = [m for m in os.environ.get("MINFER_ORACLE_MODELS", "").split(":") if m]
    for path in models:
        if os.path.exists(path):
            test_model(path)
        else:
            skip(f"{path} not found")
    if os.path.exists(smol):
        test_model(smol)
    else:
        skip(f"{os.path.relpath(smol, ROOT)} not present")
    for path in extra:
        if os.path.exists(path):
            test_model(path)
        else:
            check(False, f"MINFER_ORACLE_MODELS: {path} not found")
    return result()


if __name__ == "__main__":
    sys.exit(main())
