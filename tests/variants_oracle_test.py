#!/usr/bin/env python3
"""variants_oracle_test.py - RoPE scaling (issue 57), qwen3, qwen3moe and Mixtral's layout (issue 51) against
llama.cpp: stories260K rewritten with Llama 3.1's per-pair factors (rope_freqs.weight), YaRN
and linear scaling, as qwen3 (neox RoPE, q/k norms per head) and as qwen3moe (4 experts, 2
used) (tests/tools/stories_variants.py); 46 greedy tokens after prompts of 1,103 and 3,794 tokens
equal llama.cpp's llama-completion's, stored in tests/fixtures/variants/ (make.sh there has the
command). Each scaling is live: its continuations differ from the unscaled model's. A file
with a tensor nothing reads gets one warning at load and `minfer info` lists it; an unknown
scaling type is refused with a message naming it.

MINFER_TEST_DEVICE=cuda runs the same on the GPU (tests/run_cuda.sh); MINFER_ROPE_VARIANTS=DIR
takes the files stories_variants.py wrote there (a machine without numpy/gguf)."""
import os, subprocess, sys, tempfile

from tally import Tally

BUILD = os.environ.get("BUILD", "build")
SHARED = os.environ.get("MINFER_SHARED", "../shared")
DEVICE = os.environ.get("MINFER_TEST_DEVICE", "cpu")
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "variants")
T = Tally("variants_oracle" + ("" if DEVICE == "cpu" else "_" + DEVICE))

src = os.path.join(SHARED, "models", "stories260K.gguf")
if not os.path.exists(src):
    T.need(f"{src} absent (../shared is where CI keeps it)")
    sys.exit(T.result())
PREBUILT = os.environ.get("MINFER_ROPE_VARIANTS")
if not PREBUILT:
    try:
        import numpy, gguf  # noqa: F401  (stories_variants.py writes the files with them)
    except ImportError as e:
        T.need(f"numpy/gguf not importable ({e}); run tools/deps.sh --test")
        sys.exit(T.result())

BIN = os.path.join(BUILD, "minfer")
TRACE = os.path.join(BUILD, "tools", "greedy_trace")
NEAR_TIE = 0.01  # top-2 logits closer than this part engines on rounding alone


def cpu_margin_at(model, prompt, nbytes):
    """The CPU's top-2 margin at the greedy step whose text holds byte nbytes of the
    continuation (tests/tools/greedy_trace), or None."""
    if not os.path.exists(TRACE):
        return None
    text = open(os.path.join(FIX, prompt + ".txt"), encoding="utf-8").read()
    r = subprocess.run([TRACE, model, text, "46", "cpu"], capture_output=True)
    pos = 0
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        f = line.split("\t", 6)
        if len(f) < 7 or len(f[6]) < 2:
            continue
        q, piece, i = f[6][1:-1], bytearray(), 0  # greedy_trace's escapes: \" \\ \xHH
        while i < len(q):
            if q[i] == "\\" and i + 1 < len(q) and q[i + 1] == "x":
                piece.append(int(q[i + 2:i + 4], 16))
                i += 4
            elif q[i] == "\\":
                piece += q[i + 1].encode()
                i += 2
            else:
                piece += q[i].encode()
                i += 1
        pos += len(piece)
        if pos > nbytes:
            return float(f[5])
    return None


def run(model, prompt):
    r = subprocess.run([BIN, "run", "-m", model, "-f", os.path.join(FIX, prompt + ".txt"), "-n", "46", "--temp", "0",
                        "-c", "4096", "-t", "2", "--device", DEVICE], capture_output=True)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


with tempfile.TemporaryDirectory() as tmp:
    if PREBUILT:
        tmp = PREBUILT
    else:
        subprocess.run([sys.executable, os.path.join(HERE, "tools", "stories_variants.py"), src, tmp], check=True)
    models = {"none": src}
    names = ["llama3", "yarn", "linear", "qwen3", "qwen3moe"]
    # (a Mixtral-layout file: its fixtures come from the GPU machine's llama.cpp build,
    # bench/moe_session.sh oracle; checked where they are present)
    if os.path.exists(os.path.join(FIX, "mixtral.prompt1k.out")):
        names.append("mixtral")
    models.update({v: os.path.join(tmp, v + ".gguf") for v in names})
    got = {}
    for v, path in models.items():
        for p in ("prompt1k", "prompt4k"):
            rc, out, err = run(path, p)
            want = open(os.path.join(FIX, f"{v}.{p}.out"), encoding="utf-8").read()
            # llama-completion ends with a newline of its own, minfer run with one
            same = rc == 0 and out.rstrip("\n") == want.rstrip("\n")
            how = "equal to llama.cpp"
            if not same and rc == 0 and DEVICE != "cpu":
                # The GPU keeps an f16 KV cache: equal to llama.cpp's continuation with one
                # (-ctk f16 -ctv f16), or parting from the f32 one only at a step where the
                # CPU's top two logits are a near-tie (rounding decides there, not the maths)
                want16 = open(os.path.join(FIX, f"{v}.{p}.f16kv.out"), encoding="utf-8").read()
                if out.rstrip("\n") == want16.rstrip("\n"):
                    same, how = True, "equal to llama.cpp with an f16 cache"
                else:
                    a, b = out.encode(), want.encode()
                    n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                    margin = cpu_margin_at(path, p, n)
                    if margin is not None and margin < NEAR_TIE:
                        same, how = True, f"parts from llama.cpp at byte {n}, a near-tie on the CPU (top-2 {margin:.4f} apart)"
            print(f"  {v} {p}: {how if same else 'DIFFERS'}")
            T.check(same, f"{v} {p} on {DEVICE}: exit {rc}\n    minfer:    {out[:120]!r}\n    llama.cpp: {want[:120]!r}"
                          f"\n    {err.strip()[-300:]}")
            got[(v, p)] = out
    for v in names:
        live = any(got[(v, p)] != got[("none", p)] for p in ("prompt1k", "prompt4k"))
        T.check(live, f"{v}: the same continuations as without scaling")
    if DEVICE == "cpu":
        unused = os.path.join(tmp, "unused.gguf")
        rc, out, err = run(unused, "prompt1k")
        warn = [l for l in err.splitlines() if "blk.0.attn_sinks.weight" in l]
        T.check(rc == 0 and len(warn) == 1 and "warning" in warn[0],
                f"unused tensor: exit {rc}, want one warning naming it, stderr: {err[-400:]!r}")
        r = subprocess.run([BIN, "info", "-m", unused], capture_output=True, text=True)
        T.check(r.returncode == 0 and "unused tensors: blk.0.attn_sinks.weight" in r.stdout,
                f"minfer info lists the unused tensor: {r.stdout[-300:]!r}")
        r = subprocess.run([BIN, "info", "-m", models["llama3"]], capture_output=True, text=True)
        T.check("unused tensors: none" in r.stdout and "rope scaling" in r.stdout,
                f"minfer info of llama3: {r.stdout[-300:]!r}")
        rc, out, err = run(os.path.join(tmp, "badtype.gguf"), "prompt1k")
        T.check(rc != 0 and "'longrope'" in err and "rope.scaling.type" in err and "Traceback" not in err,
                f"unknown scaling type: exit {rc}, stderr {err[-300:]!r}")
sys.exit(T.result())
