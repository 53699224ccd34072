#!/usr/bin/env python3
"""grammar_test.py - GBNF grammars through $BUILD/tools/gram_tool (issue 54).

(a) minfer's own grammars (tests/grammars/*.gbnf): each parses; texts it must match,
    texts it must refuse; random sentences drawn from it (gram_tool gen: walks over
    token masks) are matched by it again, and json_value's parse as JSON.
(b) llama.cpp's grammars/ directory at a pinned commit, fetched at test time into
    $BUILD/llama-grammars/<commit>/ (nothing of llama.cpp is kept in this
    repository): each is accepted, matches sample texts written here, refuses wrong
    ones, and enforces itself on random sentences. MINFER_LLAMA_GRAMMARS=DIR takes
    the .gbnf files from DIR instead (offline). Without network or DIR: one skip
    that says so.

Prints "RESULT grammar passed=P failed=F skipped=S".
"""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

from tally import Tally

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BUILD_DIR = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
TOOL = os.path.join(BUILD_DIR, "tools", "gram_tool")
T = Tally("grammar")
check = T.check

# ggml-org/llama.cpp master of 2026-08-07 (82bb485), whose grammars/ the engine was checked against
LLAMA_COMMIT = "82bb48500a9a6b3374da2cf5811695369278e4d3"
LLAMA_URL = "https://raw.githubusercontent.com/ggml-org/llama.cpp/{commit}/grammars/{name}"

# name -> (texts it matches, texts it refuses)
OWN = {
    "json_value.gbnf": (['{"a": [1, -2.5e+3, "x\\u00e9y"], "b": {"c": null}}', "[]", '"\\n"', "-0.5"],
                        ['{"a" 1}', "[1,]", "01", '"\x01"']),
    "expr.gbnf": (["1+2 = 3\n", "(a*b)-c/4 = 0.5\n--x = 1\n"], ["1+ = 2\n", "1 = 2"]),
    "csv.gbnf": (['a,b\n1,"x,""y"""\n', "x\n\n"], ['a\n"x\n', "a,b\n"]),
    "answer.gbnf": (["Yes. Reason: it rains.", "Maybe. Reason: one two three four five six seven eight nine ten eleven twelve."],
                    ["Yes. Reason:.", "Sure. Reason: x.",
                     "No. Reason: one two three four five six seven eight nine ten eleven twelve thirteen."]),
    "dates.gbnf": (["- 2024-02-29\n- 1999-12-31 (new year's eve)\n"], ["- 2024-13-01\n", "- 2024-01-01 ()\n"]),
    "action.gbnf": (['THINK: look it up\nACTION: search(q="llama", n=3)', "FINAL: 42"], ["ACTION: rm()", "THINK: x\n"]),
    "unicode.gbnf": (["héllo привет αβγ 😀", "こんにちは"], ["hello", "你好 😀😀"]),
}

LLAMA = {
    "arithmetic.gbnf": (["1+2=3\n", "(a +b)*c= 4\nx=1\n"], ["1+2=3", "=3\n"]),
    "c.gbnf": (["int main(){return 0;}", "float f(int x){x = x*2;while(x<10){x = x+1;}return x;}"],
               ["int main() {}", "main(){}"]),
    "chess.gbnf": (["1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O-O Qxd8#\n"], ["1. e4 e5\n", "1. e9 e5\n2. a3 a6\n"]),
    "english.gbnf": (["Hello, world! It's 42.", "one\ttwo"], ["", "héllo"]),
    "japanese.gbnf": (["こんにちは、世界", "カタカナ ひらがな"], ["hello", "日本 x"]),
    "json.gbnf": (['{"a": [1, 2.5, "x\\u00e9"], "b": null}', "{}"], ['{"a" 1}', "[1]"]),
    "json_arr.gbnf": (['[\n{"a": 1},\n"x"]', "[\n]"], ["[1]", '{"a": 1}']),
    "list.gbnf": (["- one\n- two\n"], ["one\n", "- \n"]),
}


def tool(args, inp=None):
    return subprocess.run([TOOL] + args, capture_output=True, timeout=120)


def match(grammar, text):
    with tempfile.NamedTemporaryFile("wb", delete=False) as f:
        f.write(text.encode())
        path = f.name
    try:
        return tool(["match", grammar, path]).returncode
    finally:
        os.unlink(path)


def exercise(path, good, bad, label, seeds=(1, 2)):
    r = tool(["check", path])
    if not check(r.returncode == 0, f"{label}: refused: {r.stderr.decode().strip()}"):
        return
    for t in good:
        rc = match(path, t)
        check(rc == 0, f"{label}: {t!r} should match (exit {rc})")
    for t in bad:
        rc = match(path, t)
        check(rc in (3, 4), f"{label}: {t!r} should not match (exit {rc})")
    done = 0
    for seed in seeds:
        r = tool(["gen", path, str(seed), "6", "300"])
        if not check(r.returncode == 0, f"{label}: gen exit {r.returncode}: {r.stderr.decode()[-200:]}"):
            continue
        for line in r.stdout.decode().splitlines():
            s = json.loads(line)
            if s is None:
                continue
            text = s.encode("latin-1").decode("utf-8")
            done += 1
            rc = match(path, text)
            check(rc == 0, f"{label}: its own random sentence {text[:80]!r} does not match (exit {rc})")
            if label.endswith("json_value.gbnf") or label.endswith("/json.gbnf"):
                try:
                    json.loads(text)
                    check(True, "")
                except ValueError as e:
                    check(False, f"{label}: random sentence is not JSON ({e}): {text[:80]!r}")
    print(f"{label}: {len(good)} matched, {len(bad)} refused, {done} random sentences re-matched")


def llama_dir():
    d = os.environ.get("MINFER_LLAMA_GRAMMARS")
    if d:
        return d, None
    d = os.path.join(BUILD_DIR, "llama-grammars", LLAMA_COMMIT[:12])
    os.makedirs(d, exist_ok=True)
    for name in LLAMA:
        p = os.path.join(d, name)
        if os.path.exists(p):
            continue
        url = LLAMA_URL.format(commit=LLAMA_COMMIT, name=name)
        try:
            with urllib.request.urlopen(url, timeout=15) as r:
                data = r.read()
        except Exception as e:  # noqa: BLE001 - no network is a skip, any cause
            return None, f"cannot fetch {url} ({e.__class__.__name__}: {e}); set MINFER_LLAMA_GRAMMARS=DIR to use local copies"
        with open(p + ".tmp", "wb") as f:
            f.write(data)
        os.replace(p + ".tmp", p)
    return d, None


def main():
    if not os.path.exists(TOOL):
        check(False, f"{TOOL} missing (make tests-build)")
        return T.result()
    for name, (good, bad) in OWN.items():
        exercise(os.path.join(ROOT, "tests", "grammars", name), good, bad, f"tests/grammars/{name}")
    d, why = llama_dir()
    if d is None:
        T.skip(f"llama.cpp grammars at {LLAMA_COMMIT[:12]}: {why}")
    else:
        for name, (good, bad) in LLAMA.items():
            p = os.path.join(d, name)
            if not check(os.path.exists(p), f"llama.cpp grammar {p} missing"):
                continue
            exercise(p, good, bad, f"llama.cpp/{name}")
    return T.result()


if __name__ == "__main__":
    sys.exit(main())
