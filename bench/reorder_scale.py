"""Cost of the reordering analysis (CL209) on big generated plans (issue 6).

1. The 1,024-rank plan of bench/plans.py (tp=8 pp=8 dp=16, 1F1B, 64 microbatches, ~615k
   actions) as generated: no op carries a `bucket` or `thread`, so the analysis is one linear
   scan. Prints check time with and without it and the overhead ratio.
2. The same plan with nondeterminism added on every rank: the final dp and embedding
   all-reduces become DDP bucket ops (`bucket` 0, 1) and every tp all-reduce is issued from a
   second thread (`thread: tp`) — windows of hundreds of unordered ops. Prints the analysis
   time per model, actions per second, and the potential deadlocks found.

    nice -n 10 python bench/reorder_scale.py            # 1,024 ranks
    nice -n 10 python bench/reorder_scale.py --small    # 64 ranks, for a quick look
"""

from __future__ import annotations

import gc
import sys
import time

from commlint.graph.check import check_trace
from commlint.graph.reorder import find_witnesses
from commlint.plans.io import loads_trace

BIG = (
    "version: 1\n"
    "generate: {world_size: 1024, degrees: {tp: 8, pp: 8, dp: 16}, schedule: 1f1b, "
    "microbatches: 64}\n"
)
SMALL = (
    "version: 1\n"
    "generate: {world_size: 64, degrees: {tp: 2, pp: 4, dp: 8}, schedule: 1f1b, "
    "microbatches: 16}\n"
)


def annotate(trace):
    """Bucket the data-parallel all-reduces and move tp collectives to a second thread."""
    for acts in trace.ranks.values():
        bucket = 0
        for a in acts:
            if a.op == "all_reduce" and a.group.startswith(("dp", "embd")):
                a.bucket = bucket
                bucket += 1
            elif a.op == "all_reduce" and a.group.startswith("tp"):
                a.thread = "tp"
    return trace


def timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    text = SMALL if "--small" in sys.argv else BIG
    trace = loads_trace(text)
    n = trace.num_actions()
    print(f"plan: {trace.world_size} ranks, {n:,} actions, model {trace.backend or 'gloo'}")
    off, _ = timed(lambda: check_trace(trace, None, reorder=False))
    on, res = timed(lambda: check_trace(trace, None, reorder=True))
    print("1. as generated (no bucket/thread fields)")
    print(f"  check without reordering  {off:7.3f} s")
    print(f"  check with reordering     {on:7.3f} s   overhead {on / off - 1:+.1%}")
    print(f"  CL209 findings            {sum(f.code == 'CL209' for f in res.findings)}")
    annotate(trace)
    floating = sum(
        a.bucket is not None or a.thread is not None for v in trace.ranks.values() for a in v
    )
    print(f"2. annotated: {floating:,} floating ops (buckets + a second thread)")
    for model in ("gloo", "nccl", "single-queue"):
        base, _ = timed(lambda m=model: check_trace(trace, m, reorder=False))
        t, ws = timed(lambda m=model: find_witnesses(trace, m))
        print(
            f"  {model:13s} analysis {t:7.3f} s ({n / t:,.0f} actions/s)   ordinary check "
            f"{base:6.3f} s   ratio {t / base:5.2f}x   potential deadlocks {len(ws)}"
        )
        for w in ws[:1]:
            print(f"    e.g. ranks {w.deadlock.ranks[:6]}…, {len(w.orders)} windows reordered")


if __name__ == "__main__":
    main()
