"""Cost of the reordering analysis (CL209) on big generated plans (issue 6).

1. The 1,024-rank plan of bench/plans.py (tp=8 pp=8 dp=16, 1F1B, 64 microbatches, ~615k
   actions) as generated: no op carries a `bucket` or `thread`, so the analysis is one linear
   scan. Prints check time with and without it and the overhead ratio.
2. The same plan with nondeterminism added on every rank: the final dp and embedding
   all-reduces become DDP bucket ops (`bucket` 0, 1) and every tp all-reduce is issued from a
   second thread (`thread: tp`). Prints per model the search alone (pruning + extraction, no
   confirmation), the search with one confirmed witness (one more run of the ordinary checker
   on the reordered trace; a weaker model's witness is tried first, as `check_trace` does),
   and the ordinary check for scale.

    nice -n 10 python bench/reorder_scale.py            # 1,024 ranks
    nice -n 10 python bench/reorder_scale.py --small    # 64 ranks, for a quick look
"""

from __future__ import annotations

import gc
import sys
import time

from commlint.graph.check import check_trace
from commlint.graph.reorder import find_witnesses, potential_deadlocks
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
    off, res = timed(lambda: check_trace(trace, None, reorder=False))
    models = ["nccl"]
    scan, found = timed(lambda: potential_deadlocks(trace, models, res.outcomes))
    print("1. as generated (no bucket/thread fields)")
    print(f"  ordinary check            {off:7.3f} s")
    print(f"  reordering analysis       {scan:7.3f} s   ({scan / off:.1%} of the check)")
    print(f"  CL209 findings            {len(found)}")
    annotate(trace)
    floating = sum(
        a.bucket is not None or a.thread is not None for v in trace.ranks.values() for a in v
    )
    print(f"2. annotated: {floating:,} floating ops (buckets + a second thread)")
    hints: list = []
    for model in ("gloo", "nccl", "single-queue"):
        base, _ = timed(lambda m=model: check_trace(trace, m, reorder=False))
        search, _ = timed(lambda m=model: find_witnesses(trace, m, checks=0))
        # as check_trace does: a weaker model's witness is confirmed first
        full, ws = timed(lambda m=model, h=hints: find_witnesses(trace, m, limit=1, hints=h))
        hints = [w.orders for w in ws] or hints
        print(
            f"  {model:13s} search {search:7.3f} s ({n / search:,.0f} actions/s, "
            f"{search / base:4.2f}x the ordinary check {base:.3f} s); "
            f"search + confirm 1 witness {full:7.3f} s; potential deadlock: {'yes' if ws else 'no'}"
        )
        for w in ws:
            print(f"    witness: ranks {w.deadlock.ranks[:8]}, {len(w.orders)} windows reordered")


if __name__ == "__main__":
    main()
