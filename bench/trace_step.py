#!/usr/bin/env python3
"""bench/trace_step.py TRACE [STEP_FROM_END] - one decode step of a block timeline
(MINFER_CUDA_TRACE=FILE on a build with -DMINFER_CUDA_TRACE=1; src/cuda/trace.cu).

The graph's launches are named in order in the file. A graph's kernel nodes keep their
grid ids across replays, so the slots hold the last replay: that step is shown (its
last launch has no span). Should the ids ever differ per replay, the step k from the
end (default 2) is the k-th run of L ids counted back from the newest. Per
launch it prints, in ns relative to the step's first wait release:
  start   the first block's start (pdl_trigger; < wait: resident ahead of the wait)
  wait    the first block's return from pdl_wait (the grid before is complete)
  late    blocks that started after that release (not resident when it came)
  span    this launch's wait to the next launch's wait: its cost on the critical path
  end     its last block's end, for kernels that call trace_end() (else -)
  gap     the next launch's wait less that end: the boundary
then the spans (and the boundaries) summed by kernel name, and for kernels with
trace_mark(k) points block 0's mean time from its wait to each. Times are the GPU's global timer (ns)."""
import collections
import sys


def main():
    path = sys.argv[1]
    back = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    names, recs = [], collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "name":
                names.append(p[2])
            elif p[0] == "rec":
                recs[int(p[1])].append(tuple(int(v) for v in p[2:]))
    L = len(names)
    grids = sorted(recs)
    if len(grids) == L:
        # a graph's kernel nodes keep their grid ids from replay to replay (seen on the
        # H200, 2026-11-29): the slots hold the last replay, one step
        back = 1
    if L == 0 or len(grids) < back * L:
        sys.exit("trace_step: %d named launches, %d grids: not enough for step -%d" % (L, len(grids), back))
    step = grids[len(grids) - back * L:len(grids) - (back - 1) * L]
    if step[-1] - step[0] != L - 1:
        print("trace_step: note: grid ids of the step are not consecutive (%d..%d for %d launches)"
              % (step[0], step[-1], L))
    nxt = grids[len(grids) - (back - 1) * L] if back > 1 else None
    waits = []
    for g in step:
        w = [r[1] for r in recs[g] if r[1]]
        waits.append(min(w) if w else min(r[0] for r in recs[g]))
    t0 = waits[0]
    end = None
    if nxt is not None:
        w = [r[1] for r in recs[nxt] if r[1]]
        end = min(w) if w else min(r[0] for r in recs[nxt])
    total = collections.Counter()
    count = collections.Counter()
    if any(waits[i + 1] < waits[i] for i in range(L - 1)):
        print("trace_step: note: wait releases are not in grid-id order")
    gaps = collections.Counter()
    ngap = collections.Counter()
    print("%4s %-22s %6s %9s %9s %5s %8s %9s %6s" % ("#", "kernel", "blocks", "start", "wait", "late", "span",
                                                      "end", "gap"))
    for i, g in enumerate(step):
        rs = recs[g]
        span = (waits[i + 1] if i + 1 < L else end) - waits[i] if (i + 1 < L or end) else 0
        late = sum(1 for r in rs if r[0] > waits[i])
        total[names[i]] += span
        count[names[i]] += 1
        ends = [r[2] for r in rs if r[2]]
        e_s, gap_s = "-", "-"
        if ends and i + 1 < L:
            gap = waits[i + 1] - max(ends)
            gaps[names[i]] += gap
            ngap[names[i]] += 1
            e_s, gap_s = str(max(ends) - t0), str(gap)
        print("%4d %-22s %6d %9d %9d %5d %8d %9s %6s" % (i, names[i][:22], len(rs), min(r[0] for r in rs) - t0,
                                                         waits[i] - t0, late, span, e_s, gap_s))
    # trace_mark(k) points: per kernel name, the mean over launches of thread 0's time
    # there after the wait, block 0
    marks = collections.defaultdict(lambda: [[], [], []])
    for i, g in enumerate(step):
        for r in recs[g]:
            if r[4] == 0 and r[1]:
                for k in range(3):
                    if r[5 + k]:
                        marks[names[i]][k].append(r[5 + k] - r[1])
    step_ns = (end - t0) if end else waits[-1] - t0
    print("\nstep %.1f us (first release to the next step's first release)" % (step_ns / 1000))
    print("%-22s %6s %10s %10s %6s %12s" % ("kernel", "count", "total us", "mean us", "share", "mean gap us"))
    for n, v in sorted(total.items(), key=lambda kv: -kv[1]):
        gs = "%.2f" % (gaps[n] / 1000 / ngap[n]) if ngap[n] else "-"
        print("%-22s %6d %10.1f %10.2f %5.1f%% %12s" % (n[:22], count[n], v / 1000, v / 1000 / count[n],
                                                        100.0 * v / step_ns, gs))
    for n, ks in sorted(marks.items()):
        if any(ks):
            print("%s: block 0 after its wait, marks at %s us" % (
                n, ", ".join("%.2f" % (sum(k) / len(k) / 1000) if k else "-" for k in ks)))


main()
