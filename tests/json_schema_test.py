#!/usr/bin/env python3
"""json_schema_test.py - the JSON-schema converter (src/json_schema.c) against Python's
`jsonschema` as the oracle, without a model (issue 54).

(a) For every schema in tests/schemas/*.json and tests/schemas/walk/*.json (those too
    open-ended for a small model: unbounded extra keys, unanchored patterns), random sentences of its grammar, drawn by
    $BUILD/tools/gram_tool gen (random walks over token masks of a toy vocabulary),
    must parse as JSON and validate (Draft 2020-12, formats checked). Walks that reach
    the length cap without a complete sentence are counted, not checked; most finish.
(b) Schemas the converter must refuse, each with a message that names the keyword
    or the problem: unsupported keywords, remote and cyclic $refs, overlapping oneOf,
    bad regex features, impossible bounds.
(c) Hostile schemas (deep nesting, a 20,000-value enum, wide objects, long
    patterns) end within a time bound, with a grammar or a clear error.

Prints "RESULT json_schema passed=P failed=F skipped=S". Without jsonschema
(tools/deps.sh --test installs it) part (a) is skipped (a failure under CI=true).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from tally import Tally

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
TOOL = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "tools", "gram_tool")
T = Tally("json_schema")
check = T.check


def run(args, timeout=60):
    return subprocess.run([TOOL] + args, capture_output=True, timeout=timeout)


def decode(line):
    """gram_tool prints each sentence as a JSON string of bytes (\\u00XX for bytes >= 0x80)."""
    s = json.loads(line)
    if s is None:
        return None
    return s.encode("latin-1").decode("utf-8")


def with_file(text, fn):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        return fn(path)
    finally:
        os.unlink(path)


def part_a():
    try:
        import jsonschema
    except ImportError as e:
        T.need(f"jsonschema not importable ({e}); run tools/deps.sh --test")
        return
    top = os.path.join(ROOT, "tests", "schemas")
    schemas = sorted(f for f in os.listdir(top) if f.endswith(".json"))
    schemas += sorted("walk/" + f for f in os.listdir(os.path.join(top, "walk")) if f.endswith(".json"))
    for name in schemas:
        path = os.path.join(top, name)
        schema = json.load(open(path))
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        done = bad = 0
        for seed in (1, 2, 3):
            r = run(["gen", "--schema", path, str(seed), "20", "600"])
            if not check(r.returncode == 0, f"{name}: gram_tool gen exit {r.returncode}: {r.stderr.decode()[-300:]}"):
                continue
            for line in r.stdout.decode().splitlines():
                text = decode(line)
                if text is None:
                    continue
                done += 1
                try:
                    errs = [e.message for e in validator.iter_errors(json.loads(text))]
                except ValueError as e:
                    errs = [f"not JSON: {e}"]
                if errs:
                    bad += 1
                    print(f"FAIL {name}: {text!r}: {errs[:2]}", file=sys.stderr)
        check(bad == 0, f"{name}: {bad} of {done} sentences do not validate")
        check(done >= 30, f"{name}: only {done} of 60 walks finished")
        print(f"{name}: {done} of 60 sentences, all valid" if not bad else f"{name}: {bad} invalid")


# (schema, a word the message must hold)
REFUSED = [
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"type": "object", "patternProperties": {"a": {}}}, "patternProperties"),
    ({"not": {"type": "string"}}, "'not'"),
    ({"type": "string", "format": "email"}, "email"),
    ({"$ref": "https://example.com/s.json"}, "only references inside the document"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "cycle"),
    ({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"}, "cycle"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
    ({"type": "string", "pattern": "^(?=a)b$"}, "lookaround"),
    ({"type": "string", "pattern": "^(a)\\1$"}, "escape"),
    ({"type": "string", "pattern": "^(a*)*$"}, "repeated group"),
    ({"type": "string", "pattern": "a{5000}"}, "4096"),
    ({"type": "integer", "minimum": 5, "maximum": 2}, "no integer"),
    ({"type": "number", "minimum": 0.5}, "integer bounds"),
    ({"type": "strnig"}, "unknown type"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "required"),
    (False, "allows no value"),
    ({"type": "string", "minLength": 10, "maxLength": 3}, "maxLength"),
    ({"enum": [1, 2], "minimum": 1}, "enum"),
]


def part_b():
    for schema, word in REFUSED:
        text = json.dumps(schema)
        r = with_file(text, lambda p: run(["schema", p]))
        msg = r.stderr.decode()
        check(r.returncode == 2 and word in msg and "json schema" in msg,
              f"{text}: want exit 2 and a message with {word!r}, got {r.returncode}: {msg.strip()}")
    r = with_file("{\"type\": ", lambda p: run(["schema", p]))
    check(r.returncode == 2 and "not valid JSON" in r.stderr.decode(), f"truncated JSON: {r.stderr.decode()}")


def deep(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


HOSTILE = [
    ("nesting 60 (within the limit)", deep(60), True),
    ("nesting 500", deep(500), False),
    ("enum of 20,000 strings", {"enum": [f"value-{i}" for i in range(20000)]}, None),
    ("500 properties", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(500)},
                        "required": [f"p{i}" for i in range(0, 500, 2)]}, True),
    ("a 4000-byte pattern", {"type": "string", "pattern": "^" + "(a|b)" * 800 + "$"}, True),
    ("allOf of 200 self-references", {"$defs": {"x": {"allOf": [{"$ref": "#/$defs/x"}] * 200}}, "$ref": "#/$defs/x"}, False),
    ("anyOf 5 deep, 8 wide (32,768 leaves)", None, None),
    ("allOf over a DAG of $refs 2^40 paths", {"$defs": dict([(f"d{i}", {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2})
                                                                for i in range(40)] + [("d40", {"type": "integer"})]),
                                              "$ref": "#/$defs/d0"}, False),
    ("anyOf over a DAG of $refs 2^20 paths", {"$defs": dict([(f"d{i}", {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"},
                                                                                  {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}]})
                                                                for i in range(20)] + [("d20", {"type": "integer"})]),
                                              "$ref": "#/$defs/d0"}, True),
    ("oneOf over a DAG of $refs", {"$defs": dict([(f"d{i}", {"oneOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]})
                                                  for i in range(40)] + [("d40", {"type": "integer"})]),
                                   "$ref": "#/$defs/d0"}, False),
]


def part_c():
    wide = {"type": "integer"}
    for _ in range(5):
        wide = {"anyOf": [wide] * 8}
    for what, schema, ok in HOSTILE:
        if schema is None:
            schema = wide
        t0 = time.time()
        r = with_file(json.dumps(schema), lambda p: run(["schema", p], timeout=30))
        dt = time.time() - t0
        check(dt < 10, f"hostile schema '{what}': {dt:.1f} s")
        if ok is True:
            check(r.returncode == 0, f"hostile schema '{what}': exit {r.returncode}: {r.stderr.decode()[-200:]}")
        elif ok is False:
            check(r.returncode == 2 and r.stderr, f"hostile schema '{what}': want a clear error, exit {r.returncode}")
        else:
            check(r.returncode in (0, 2), f"hostile schema '{what}': exit {r.returncode}")


def main():
    if not os.path.exists(TOOL):
        check(False, f"{TOOL} missing (make tests-build)")
        return T.result()
    part_a()
    part_b()
    part_c()
    return T.result()


if __name__ == "__main__":
    sys.exit(main())
