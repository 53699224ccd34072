#!/usr/bin/env python3
"""tests/trace_step_test.py - bench/trace_step.py (the reader of the CUDA block timeline,
src/cuda/trace.cu) on hand-made trace files whose spans, gaps, late blocks and marks are
known. The trace itself needs a GPU and a trace build; its format is fixed here.
Prints one "RESULT trace_step passed=P failed=F skipped=0" line."""
import importlib.util
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "trace_step.py")
spec = importlib.util.spec_from_file_location("trace_step", SCRIPT)
ts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ts)

from tally import Tally

T = Tally("trace_step")
check = T.check


def rec(grid, start, wait, end, block, marks=(0, 0, 0), smid=0):
    return "rec %d %d %d %d %d %d %d %d %d\n" % (grid, start, wait, end, smid, block, *marks)


def write(lines):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.writelines(lines)
    f.close()
    return f.name


def one_step():
    # three launches of one replay: grids 7, 8, 9 (ids kept across replays)
    lines = ["name 0 norm\n", "name 1 gemv\n", "name 2 norm\n"]
    lines += [rec(7, 900, 1000, 1800, 0, (1300, 1500, 0))]                 # norm: one block
    lines += [rec(8, 950, 2500, 9000, 0), rec(8, 960, 2510, 9400, 1),      # gemv: resident early
              rec(8, 3000, 3000, 9100, 2)]                                 # ... one block late
    lines += [rec(9, 9500, 10400, 11000, 0, (10700, 0, 0))]
    path = write(lines)
    names, recs = ts.load(path)
    launches, step_ns, notes = ts.analyse(names, recs)
    check(notes == [], "one step: no notes (%s)" % notes)
    check([k["name"] for k in launches] == ["norm", "gemv", "norm"], "one step: names in order")
    check([k["wait"] for k in launches] == [0, 1500, 9400], "one step: releases from the first wait")
    check([k["span"] for k in launches] == [1500, 7900, 0], "one step: spans (the last has no next)")
    check(launches[1]["late"] == 1 and launches[0]["late"] == 0, "one step: the block started after the release")
    check(launches[1]["start"] == -50, "one step: first start ahead of the step's first release")
    check(launches[0]["end"] == 800 and launches[0]["gap"] == 700, "one step: end and boundary of the norm")
    check(launches[1]["end"] == 8400 and launches[1]["gap"] == 1000, "one step: end is the last block's")
    check(launches[2]["gap"] is None, "one step: no boundary after the last launch")
    check(launches[0]["marks"] == [300, 500, None], "one step: block 0's marks after its wait")
    check(step_ns == 9400, "one step: step time without a next step")
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
    check(out.returncode == 0 and "marks at 0.30, 0.50, - us" in out.stdout and "step 9.4 us" in out.stdout,
          "one step: the printed table (%s)" % out.stdout[-200:])
    # the gemv's blocks: release 2500; starts -1550, -1540, 500; ends 6500, 6900, 6600
    name, rows, last = ts.spread(names, recs, 2, 1)
    q = dict(rows)
    check(name == "gemv" and q["start"] == [-1550, -1550, -1540, 500, 500] and q["end"] == [6500, 6500, 6600, 6900, 6900],
          "blocks: quantiles of start and end after the release (%s)" % rows)
    check(q["mark0"] is None and [b[0] for b in last] == [1, 2, 0], "blocks: no marks; the last to end first")
    out = subprocess.run([sys.executable, SCRIPT, path, "--blocks", "1"], capture_output=True, text=True)
    check(out.returncode == 0 and "launch 1 (gemv)" in out.stdout and "last to end" in out.stdout,
          "blocks: --blocks prints the spread (%s)" % out.stdout[-300:])
    out = subprocess.run([sys.executable, SCRIPT, path, "--blocks"], capture_output=True, text=True)
    check(out.returncode == 1 and "--blocks needs a value" in out.stderr and "Traceback" not in out.stderr,
          "blocks: --blocks without its value is a usage error (%s)" % out.stderr[-200:])
    out = subprocess.run([sys.executable, SCRIPT, path, "--blocks", "9"], capture_output=True, text=True)
    check(out.returncode == 1 and "the step has launches 0.." in out.stderr and "Traceback" not in out.stderr,
          "blocks: a launch past the step is a usage error (%s)" % out.stderr[-200:])
    os.unlink(path)


def two_steps():
    # ids that differ per replay: step -2 of two, its last span runs to the next step's release
    lines = ["name 0 a\n", "name 1 b\n"]
    lines += [rec(1, 0, 100, 400, 0), rec(2, 50, 600, 900, 0), rec(3, 1000, 1100, 1300, 0),
              rec(4, 1150, 1700, 2000, 0)]
    path = write(lines)
    launches, step_ns, notes = ts.analyse(*ts.load(path))
    check([k["span"] for k in launches] == [500, 500], "two steps: the earlier step, spans to the next release")
    check(step_ns == 1000, "two steps: step time to the next step's first release")
    os.unlink(path)


def errors():
    path = write(["name 0 a\n", "name 1 b\n", rec(1, 0, 100, 0, 0)])
    try:
        ts.analyse(*ts.load(path))
        check(False, "errors: a step with fewer grids than launches is refused")
    except ValueError:
        check(True, "")
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
    check(out.returncode != 0 and "not enough" in out.stderr, "errors: the script exits with a message")
    os.unlink(path)
    path = write(["name 0 a\n", "name 1 b\n", rec(5, 0, 900, 0, 0), rec(6, 0, 100, 0, 0)])
    _, _, notes = ts.analyse(*ts.load(path))
    check(any("not in grid-id order" in n for n in notes), "errors: releases out of order are noted")
    os.unlink(path)


def two_layers(qkv2="qkv", extra=()):
    """A trace file of embed, two layers of (norm, qkv, attn, wo) whose second q/k/v is
    named qkv2, then the output (positions 0..3): one block a launch, released at 0, 100,
    300, 700, 1200, 1300, 1600, 2000, 2600, 2700 and ending 50 before the next; extra
    records appended."""
    names = ["embed", "norm", "qkv", "attn_dec128", "wo", "norm", qkv2, "attn_dec128", "wo", "out"]
    lines = ["name %d %s\n" % (i, n) for i, n in enumerate(names)]
    waits = [0, 100, 300, 700, 1200, 1300, 1600, 2000, 2600, 2700]
    for i, w in enumerate(waits):
        end = waits[i + 1] - 50 if i + 1 < len(waits) else 0
        lines.append(rec(20 + i, w, w, end, 0))
    return write(lines + list(extra))


def per_layer():
    path = two_layers()
    launches, _, _ = ts.analyse(*ts.load(path))
    rows = ts.layers(launches)
    check([r[0] for r in rows] == [0, 1, 2, 3], "per layer: four positions (%s)" % [r[0] for r in rows])
    check([r[1] for r in rows] == [["norm"], ["qkv"], ["attn_dec128"], ["wo"]], "per layer: names by position")
    check(all(r[2] == 2 for r in rows), "per layer: two layers at each position")
    check([r[3] for r in rows] == [250.0, 400.0, 550.0, 100.0], "per layer: mean spans (%s)" % [r[3] for r in rows])
    check(rows[0][4] == 200.0 and rows[0][5] == 50.0, "per layer: own time and boundary")
    os.unlink(path)


def per_kind():
    # the second layer's q/k/v another kernel, a mixed launch of 3 blocks: a second block
    # started after its release (1600), a third resident before it
    path = two_layers("qkv+mixed", [rec(26, 1700, 1600, 1900, 1), rec(26, 1500, 1600, 1900, 2)])
    launches, _, _ = ts.analyse(*ts.load(path))
    kinds = ts.layer_kinds(launches)
    check([(r[0], r[1], r[2]) for r in kinds] ==
          [(0, "norm", 1), (1, "qkv", 1), (1, "qkv+mixed", 3), (2, "attn_dec128", 1), (3, "wo", 1)],
          "per kind: position 1 split by kernel and grid (%s)" % [(r[0], r[1], r[2]) for r in kinds])
    check([r[3] for r in kinds] == [2, 1, 1, 2, 2], "per kind: layers of each")
    check(kinds[1][4] == 400.0 and kinds[2][4] == 400.0, "per kind: spans")
    check(kinds[2][7] == 1.0 and kinds[1][7] == 0.0, "per kind: blocks started after the release")
    rows = ts.layers(launches)
    check(rows[1][1] == ["qkv", "qkv+mixed"] and rows[1][2] == 2, "per kind: the per-position table merges them")
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True)
    check(out.returncode == 0 and "per position and kernel" in out.stdout and "qkv+mixed" in out.stdout,
          "per kind: printed (%s)" % out.stdout[-300:])
    os.unlink(path)


def sms():
    # four launches of two blocks on SMs 1 and 2 (SM 2 always 100 ns later), then a launch
    # of another name (not counted)
    lines = ["name %d mmv\n" % i for i in range(4)] + ["name 4 attn\n"]
    for g in range(4):
        t = 1000 * g
        lines += [rec(10 + g, t, t + 10, t + 500, 0, smid=1), rec(10 + g, t, t + 10, t + 600 + 10 * g, 1, smid=2)]
    lines += [rec(14, 5000, 5010, 5500, 0, smid=3)]
    path = write(lines)
    names, recs = ts.load(path)
    late, r, n = ts.sm_lateness(names, recs, 2, "mmv")
    check(n == 4 and sorted(late) == [1, 2], "sms: four mmv launches, SMs 1 and 2 (%s)" % late)
    check(late[1][0] == -115.0 and late[2][0] == 0.0 and late[1][1] == 4, "sms: mean lateness against the median end")
    check(r is None, "sms: no correlation from two SMs")
    out = subprocess.run([sys.executable, SCRIPT, path, "--sms", "mmv"], capture_output=True, text=True)
    check(out.returncode == 0 and "slowest: 2:+0 1:-115" in out.stdout, "sms: printed (%s)" % out.stdout[-300:])
    os.unlink(path)


one_step()
sms()
per_layer()
per_kind()
two_steps()
errors()
sys.exit(T.result())
