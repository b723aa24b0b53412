"""Checker throughput on synthetic traces of realistic shape (issue 2).

Builds DP × TP × PP training-step traces — TP all-reduces per layer, PP forward/backward
send/recv per microbatch, DP gradient all-reduces per step — at 10k, 100k, 1M and 4M actions,
then times `check_trace` (compile + simulate + verdict) on one core. Prints actions/s per size
and the growth exponent of time against size (1.0 = linear). Goal: >= 300,000 actions/s.

    python bench/checker.py            # all sizes
    python bench/checker.py 10000 100000
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import resource
import sys
import time

from commlint.graph import check_trace
from commlint.trace import Action, Trace

TP, PP, DP = 4, 4, 4
LAYERS = 4  # per stage


def rank_of(t: int, p: int, d: int) -> int:
    return t + TP * (d + DP * p)  # Megatron order tp-dp-pp: tp fastest


def build(target_actions: int) -> Trace:
    world = TP * PP * DP
    groups: dict[str, list[int]] = {}
    for p in range(PP):
        for d in range(DP):
            groups[f"tp_p{p}_d{d}"] = [rank_of(t, p, d) for t in range(TP)]
        for t in range(TP):
            groups[f"dp_p{p}_t{t}"] = [rank_of(t, p, d) for d in range(DP)]
    ranks: dict[int, list[Action]] = {r: [] for r in range(world)}
    mk = Action.model_construct
    per_step = 0
    step = 0
    while True:
        for p in range(PP):
            for d in range(DP):
                for t in range(TP):
                    r = rank_of(t, p, d)
                    acts = ranks[r]
                    tp = f"tp_p{p}_d{d}"
                    mb = 4
                    for m in range(mb):  # forward (GPipe: all forwards, then all backwards)
                        if p > 0:
                            acts.append(
                                mk(
                                    op="recv",
                                    peer=rank_of(t, p - 1, d),
                                    group="WORLD",
                                    tag=0,
                                    site="pipe.py:40",
                                    label=f"F{m}",
                                )
                            )
                        for _ in range(LAYERS):
                            acts.append(mk(op="all_reduce", group=tp, tag=0, site="layers.py:88"))
                        if p < PP - 1:
                            acts.append(
                                mk(
                                    op="send",
                                    peer=rank_of(t, p + 1, d),
                                    group="WORLD",
                                    tag=0,
                                    site="pipe.py:44",
                                )
                            )
                    for m in range(mb):  # backward
                        if p < PP - 1:
                            acts.append(
                                mk(
                                    op="recv",
                                    peer=rank_of(t, p + 1, d),
                                    group="WORLD",
                                    tag=0,
                                    site="pipe.py:52",
                                    label=f"B{m}",
                                )
                            )
                        for _ in range(LAYERS):
                            acts.append(mk(op="all_reduce", group=tp, tag=0, site="layers.py:95"))
                        if p > 0:
                            acts.append(
                                mk(
                                    op="send",
                                    peer=rank_of(t, p - 1, d),
                                    group="WORLD",
                                    tag=0,
                                    site="pipe.py:56",
                                )
                            )
                    for _ in range(2):  # DP gradient buckets
                        acts.append(
                            mk(op="all_reduce", group=f"dp_p{p}_t{t}", tag=0, site="ddp.py:10")
                        )
        step += 1
        total = sum(len(a) for a in ranks.values())
        per_step = per_step or total
        if total + per_step > target_actions and total >= target_actions * 0.9:
            break
        if total >= target_actions:
            break
    return Trace.model_construct(
        version=1,
        world_size=world,
        groups=groups,
        ranks=ranks,
        ends={},
        backend=None,
        source="bench",
        meta={},
    )


def wide_hangs(w: int) -> list[tuple[str, Trace]]:
    """Hangs whose wait-for graph is large: a star, a ring, a clique."""
    mk = Action.model_construct
    star = {
        r: [mk(op="all_reduce", group="WORLD", tag=0), mk(op="barrier", group="WORLD", tag=0)]
        for r in range(w)
    }
    star[w - 1] = star[w - 1][::-1]
    ring = {
        r: [
            mk(op="send", peer=(r + 1) % w, group="WORLD", tag=0),
            mk(op="recv", peer=(r - 1) % w, group="WORLD", tag=0),
        ]
        for r in range(w)
    }
    k = 48
    clique = {
        r: [mk(op="all_reduce", group=f"g{(r + j) % k}", tag=0) for j in range(k)] for r in range(k)
    }
    build = Trace.model_construct
    return [
        (
            f"{w} ranks, one rank issues another collective",
            build(version=1, world_size=w, groups={}, ranks=star, ends={}),
        ),
        (
            f"{w}-rank send ring (one {w}-cycle)",
            build(version=1, world_size=w, groups={}, ranks=ring, ends={}),
        ),
        (
            f"{k}-rank clique of group waits",
            build(
                version=1,
                world_size=k,
                groups={f"g{j}": list(range(k)) for j in range(k)},
                ranks=clique,
                ends={},
            ),
        ),
    ]


def measure(n: int) -> tuple[int, float, float, float]:
    trace = build(n)
    actions = trace.num_actions()
    gc.collect()
    gc.disable()  # the trace is immutable input; measure the checker, not the collector
    t0, c0 = time.perf_counter(), time.process_time()
    result = check_trace(trace, "gloo", reorder=False)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    c1 = time.process_time()
    full = check_trace(trace, "gloo", reorder=True)
    with_reorder = time.process_time() - c1
    assert not [f for f in full.findings if f.severity == "error"]
    gc.enable()
    assert not [f for f in result.findings if f.severity == "error"], "bench trace must be clean"
    assert all(o.status == "finished" for o in result.outcomes["gloo"].values())
    return actions, dt, cpu, with_reorder


def main(argv: list[str]) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    sizes = [int(a) for a in argv] or [10_000, 100_000, 1_000_000, 4_000_000]
    rows = []
    print(f"load average before: {os.getloadavg()[0]:.2f} (other processes share the cores)")
    print("checker = matching + progress + wait-for graph; +reorder = with CL209 exploration")
    print(
        f"{'actions':>10} {'wall s':>8} {'cpu s':>8} {'actions/s (cpu)':>16} {'vs 300k/s':>9}"
        f" {'+reorder cpu s':>15} {'actions/s':>10}"
    )
    for n in sizes:
        actions, dt, cpu, full = measure(n)
        rows.append((actions, cpu))
        rate = actions / cpu
        print(
            f"{actions:>10,} {dt:>8.3f} {cpu:>8.3f} {rate:>16,.0f} {rate / 300_000:>8.2f}x"
            f" {full:>15.3f} {actions / full:>10,.0f}",
            flush=True,
        )
    for (a0, t0), (a1, t1) in itertools.pairwise(rows):
        exp = math.log(t1 / t0) / math.log(a1 / a0)
        print(f"growth exponent (cpu time) {a0:,} → {a1:,}: {exp:.2f}")
    print("wait-for graphs at scale (cpu s, all three models):")
    for label, trace in wide_hangs(1024):
        c0 = time.process_time()
        result = check_trace(trace, "all", reorder=False)
        codes = sorted({f.code for f in result.findings})
        print(f"  {label:<44} {time.process_time() - c0:7.3f}  {codes}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:,.0f} MiB (includes the trace objects)")


if __name__ == "__main__":
    main(sys.argv[1:])
