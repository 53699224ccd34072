#!/usr/bin/env python3
"""bench/trace_step.py TRACE [STEP_FROM_END] [--blocks I,J,..] [--sms PREFIX] - one decode step of a block timeline
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
  marks   block 0's trace_mark(0..2) times after its wait (common.cuh lists them)
then the spans (and the boundaries) summed by kernel name, per position in a layer
(the step cut two launches before each attention) the mean span, own time and
boundary, and for kernels with trace_mark(k) points block 0's mean time from its
wait to each. With --blocks, for the step's launches I, J, .. (their # in the table) the
spread over their blocks: quantiles of each block's start, marks and end after the
launch's release, and the blocks that ended last (where a GEMV's tail comes from). With
--sms, over the step's launches whose name starts with PREFIX (e.g. mmv): each SM's
lateness (its blocks' end less their launch's median end, averaged), the slowest and
fastest SMs, and how well an SM's lateness in the first half of those launches predicts
it in the second (a correlation near 1: the SMs keep their rates, and rows weighted per SM
could even the tails). Times are the GPU's global timer (ns)."""
import collections
import sys

# a record: (t_start, t_wait, t_end, smid, block, mark0, mark1, mark2), ns; 0 = not reached
T_START, T_WAIT, T_END, SMID, BLOCK, MARK0 = range(6)


def load(path):
    """The launch names of the last captured graph and the records by grid id."""
    names, recs = [], collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            p = line.split()
            if p[0] == "name":
                names.append(p[2])
            elif p[0] == "rec":
                recs[int(p[1])].append(tuple(int(v) for v in p[2:]))
    return names, recs


def release(rs):
    """A grid's wait release: its first block's, or its first start if none waited."""
    w = [r[T_WAIT] for r in rs if r[T_WAIT]]
    return min(w) if w else min(r[T_START] for r in rs)


def step_grids(names, recs, back):
    """The grid ids of the step shown, the sorted ids of all grids and back as used: a
    graph's kernel nodes keep their grid ids from replay to replay (seen on the H200,
    2026-11-29), so with as many grids as launches the slots hold the last replay, one
    step (back 1)."""
    L = len(names)
    grids = sorted(recs)
    if len(grids) == L:
        back = 1
    if L == 0 or len(grids) < back * L:
        raise ValueError("%d named launches, %d grids: not enough for step -%d" % (L, len(grids), back))
    return grids[len(grids) - back * L:len(grids) - (back - 1) * L], grids, back


def analyse(names, recs, back=2):
    """One step: (launches, step_ns, notes); a launch is a dict with name, blocks,
    start, wait, late, span, end, gap (times relative to the step's first release;
    end and gap None without trace_end) and marks (block 0's trace_mark times after
    its wait, None where not reached)."""
    L = len(names)
    notes = []
    step, grids, back = step_grids(names, recs, back)
    if step[-1] - step[0] != L - 1:
        notes.append("grid ids of the step are not consecutive (%d..%d for %d launches)" % (step[0], step[-1], L))
    waits = [release(recs[g]) for g in step]
    if any(waits[i + 1] < waits[i] for i in range(L - 1)):
        notes.append("wait releases are not in grid-id order")
    t0 = waits[0]
    end = release(recs[grids[len(grids) - (back - 1) * L]]) if back > 1 else None
    out = []
    for i, g in enumerate(step):
        rs = recs[g]
        nxt = waits[i + 1] if i + 1 < L else end
        ends = [r[T_END] for r in rs if r[T_END]]
        b0 = [r for r in rs if r[BLOCK] == 0 and r[T_WAIT]]
        out.append({
            "name": names[i], "blocks": len(rs), "start": min(r[T_START] for r in rs) - t0,
            "wait": waits[i] - t0, "late": sum(1 for r in rs if r[T_START] > waits[i]),
            "span": nxt - waits[i] if nxt is not None else 0,
            "end": max(ends) - t0 if ends else None,
            "gap": nxt - max(ends) if ends and i + 1 < L else None,
            "marks": [b0[0][MARK0 + k] - b0[0][T_WAIT] if b0 and b0[0][MARK0 + k] else None for k in range(3)],
        })
    step_ns = (end - t0) if end else waits[-1] - t0
    return out, step_ns, notes


def quantiles(v, qs=(0.0, 0.1, 0.5, 0.9, 1.0)):
    """The qs quantiles of the values v (nearest rank), None for an empty v."""
    if not v:
        return None
    v = sorted(v)
    return [v[min(len(v) - 1, int(round(q * (len(v) - 1))))] for q in qs]


def spread(names, recs, back, index):
    """Launch `index` of the step: (name, rows, last) with rows the quantiles (0, 10, 50,
    90, 100%) over its blocks of start, mark0..2 and end, relative to its release (None
    where no block reached it), and last its 8 latest-ending blocks as (block, smid,
    start, mark0, mark2, end)."""
    step = step_grids(names, recs, back)[0]
    rs = recs[step[index]]
    t0 = release(rs)
    rel = lambda r, k: r[k] - t0 if r[k] else None
    rows = []
    for label, k in (("start", T_START), ("mark0", MARK0), ("mark1", MARK0 + 1), ("mark2", MARK0 + 2), ("end", T_END)):
        rows.append((label, quantiles([rel(r, k) for r in rs if r[k]])))
    ended = sorted((r for r in rs if r[T_END]), key=lambda r: -r[T_END])[:8]
    last = [(r[BLOCK], r[SMID], rel(r, T_START), rel(r, MARK0), rel(r, MARK0 + 2), rel(r, T_END)) for r in ended]
    return names[index], rows, last


def sm_lateness(names, recs, back, prefix):
    """Over the step's launches named prefix*: ({smid: (mean lateness ns, blocks)}, r, n)
    with lateness = a block's end less its launch's median end, r the correlation of the
    SMs' mean lateness in the first half of those launches with the second (None when
    fewer than 3 SMs have both), n the launches."""
    step = step_grids(names, recs, back)[0]
    idx = [i for i in range(len(names)) if names[i].startswith(prefix)]
    halves = [collections.defaultdict(list), collections.defaultdict(list)]
    total = collections.defaultdict(list)
    for k, i in enumerate(idx):
        ends = sorted(r[T_END] for r in recs[step[i]] if r[T_END])
        if not ends:
            continue
        med = ends[len(ends) // 2]
        for r in recs[step[i]]:
            if r[T_END]:
                halves[0 if k < len(idx) // 2 else 1][r[SMID]].append(r[T_END] - med)
                total[r[SMID]].append(r[T_END] - med)
    mean = lambda v: sum(v) / len(v)
    both = [s for s in halves[0] if s in halves[1]]
    r = None
    if len(both) >= 3:
        a = [mean(halves[0][s]) for s in both]
        b = [mean(halves[1][s]) for s in both]
        ma, mb = mean(a), mean(b)
        va = sum((x - ma) ** 2 for x in a)
        vb = sum((y - mb) ** 2 for y in b)
        if va > 0 and vb > 0:
            r = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (va * vb) ** 0.5
    return {s: (mean(v), len(v)) for s, v in total.items()}, r, len(idx)


def by_position(launches):
    """The step's launches by their position in a layer: the step cut at each attention
    launch less two (norm, q/k/v, attention, ...). {position: [launch, ...]}, empty for
    fewer than two attention launches."""
    anchors = [i for i, k in enumerate(launches) if k["name"].startswith("attn")]
    if len(anchors) < 2:
        return {}
    cuts = [a - 2 for a in anchors if a >= 2] + [None]
    pos = collections.defaultdict(list)
    for a, b in zip(cuts, cuts[1:]):
        seg = launches[a:b] if b is not None else launches[a:a + (cuts[1] - cuts[0])]
        for j, k in enumerate(seg):
            pos[j].append(k)
    return pos


def means(ks):
    """(n, span, own, gap, late) means over the launches ks: own = end - wait (None
    without trace_end), gap None where not known, late = blocks started after the release."""
    own = [k["end"] - k["wait"] for k in ks if k["end"] is not None]
    gap = [k["gap"] for k in ks if k["gap"] is not None]
    return (len(ks), sum(k["span"] for k in ks) / len(ks), sum(own) / len(own) if own else None,
            sum(gap) / len(gap) if gap else None, sum(k["late"] for k in ks) / len(ks))


def layers(launches):
    """Per position in a layer, means over the layers: [(position, names, n, span, own,
    gap)] (means())."""
    pos = by_position(launches)
    return [(j, sorted(set(k["name"] for k in pos[j]))) + means(pos[j])[:4] for j in sorted(pos)]


def layer_kinds(launches):
    """The same split by kernel name and grid at each position (a position whose layers
    run different kernels, e.g. q/k/v with and without a v of another type, or ffn_down
    of q4_K and q6_K): [(position, name, blocks, n, span, own, gap, late)]."""
    pos = by_position(launches)
    out = []
    for j in sorted(pos):
        kinds = collections.defaultdict(list)
        for k in pos[j]:
            kinds[(k["name"], k["blocks"])].append(k)
        for (name, blocks), ks in sorted(kinds.items()):
            out.append((j, name, blocks) + means(ks))
    return out


USAGE = "usage: trace_step.py TRACE [STEP_FROM_END] [--blocks I,J,..] [--sms PREFIX]"


def take_option(args, flag):
    """The value after flag in args (both removed), None without flag; a usage error
    when nothing follows it."""
    if flag not in args:
        return None
    i = args.index(flag)
    if i + 1 >= len(args) or args[i + 1].startswith("--"):
        sys.exit("trace_step: %s needs a value; %s" % (flag, USAGE))
    v = args[i + 1]
    del args[i:i + 2]
    return v


def main():
    args = sys.argv[1:]
    blocks, sms = take_option(args, "--blocks"), take_option(args, "--sms")
    try:
        want = [int(v) for v in blocks.split(",")] if blocks is not None else []
    except ValueError:
        sys.exit("trace_step: --blocks takes launch numbers, e.g. 3,11; %s" % USAGE)
    if not args:
        sys.exit(USAGE)
    names, recs = load(args[0])
    back = int(args[1]) if len(args) > 1 else 2
    try:
        launches, step_ns, notes = analyse(names, recs, back)
    except ValueError as e:
        sys.exit("trace_step: %s" % e)
    bad = [i for i in want if not 0 <= i < len(launches)]
    if bad:
        sys.exit("trace_step: --blocks %s: the step has launches 0..%d" % (",".join(map(str, bad)), len(launches) - 1))
    for n in notes:
        print("trace_step: note: %s" % n)
    print("%4s %-22s %6s %9s %9s %5s %8s %9s %6s  %s" % ("#", "kernel", "blocks", "start", "wait", "late", "span",
                                                          "end", "gap", "marks"))
    total, count = collections.Counter(), collections.Counter()
    gaps, ngap = collections.Counter(), collections.Counter()
    marks = collections.defaultdict(lambda: [[], [], []])
    for i, k in enumerate(launches):
        total[k["name"]] += k["span"]
        count[k["name"]] += 1
        if k["gap"] is not None:
            gaps[k["name"]] += k["gap"]
            ngap[k["name"]] += 1
        for j, m in enumerate(k["marks"]):
            if m is not None:
                marks[k["name"]][j].append(m)
        print("%4d %-22s %6d %9d %9d %5d %8d %9s %6s  %s" % (
            i, k["name"][:22], k["blocks"], k["start"], k["wait"], k["late"], k["span"],
            "-" if k["end"] is None else k["end"], "-" if k["gap"] is None else k["gap"],
            " ".join("-" if m is None else str(m) for m in k["marks"]) if any(k["marks"]) else ""))
    print("\nstep %.1f us (first release to the next step's first release)" % (step_ns / 1000))
    print("%-22s %6s %10s %10s %6s %12s" % ("kernel", "count", "total us", "mean us", "share", "mean gap us"))
    for n, v in sorted(total.items(), key=lambda kv: -kv[1]):
        gs = "%.2f" % (gaps[n] / 1000 / ngap[n]) if ngap[n] else "-"
        print("%-22s %6d %10.1f %10.2f %5.1f%% %12s" % (n[:22], count[n], v / 1000, v / 1000 / count[n],
                                                        100.0 * v / step_ns, gs))
    rows = layers(launches)
    if rows:
        print("\nper position in a layer (means over layers, us)")
        print("%3s %-32s %6s %8s %8s %8s" % ("pos", "kernel", "layers", "span", "own", "gap"))
        for j, nm, n, span, own, gap in rows:
            print("%3d %-32s %6d %8.2f %8s %8s" % (j, "/".join(nm)[:32], n, span / 1000,
                                                  "-" if own is None else "%.2f" % (own / 1000),
                                                  "-" if gap is None else "%.2f" % (gap / 1000)))
    kinds = layer_kinds(launches)
    if kinds and len(kinds) > len(rows):
        print("\nper position and kernel (means over its layers, us; late: blocks started after the release)")
        print("%3s %-22s %6s %6s %8s %8s %8s %6s" % ("pos", "kernel", "blocks", "layers", "span", "own", "gap", "late"))
        for j, nm, nb, n, span, own, gap, late in kinds:
            print("%3d %-22s %6d %6d %8.2f %8s %8s %6.1f" % (j, nm[:22], nb, n, span / 1000,
                                                           "-" if own is None else "%.2f" % (own / 1000),
                                                           "-" if gap is None else "%.2f" % (gap / 1000), late))
    for n, ks in sorted(marks.items()):
        if any(ks):
            print("%s: block 0 after its wait, marks at %s us" % (
                n, ", ".join("%.2f" % (sum(k) / len(k) / 1000) if k else "-" for k in ks)))
    for i in want:
        name, rows, last = spread(names, recs, back, i)
        print("\nlaunch %d (%s): over its blocks, ns after its release (min, 10%%, 50%%, 90%%, max)" % (i, name))
        for label, q in rows:
            print("  %-6s %s" % (label, "-" if q is None else " ".join("%7d" % v for v in q)))
        print("  last to end (block, sm, start, mark0, mark2, end): " +
              "; ".join(" ".join("-" if v is None else str(v) for v in b) for b in last))
    if sms is not None:
        late, r, n = sm_lateness(names, recs, back, sms)
        order = sorted(late.items(), key=lambda kv: -kv[1][0])
        fmt = lambda kv: "%d:%+.0f" % (kv[0], kv[1][0])
        print("\nSMs over %d launches named %s*: lateness (end less the launch's median end, mean ns)" % (n, sms))
        print("  slowest: " + " ".join(fmt(kv) for kv in order[:10]))
        print("  fastest: " + " ".join(fmt(kv) for kv in order[-10:]))
        print("  first half vs second half of the launches, correlation of the SMs' lateness: %s" %
              ("-" if r is None else "%.2f" % r))


if __name__ == "__main__":
    main()
