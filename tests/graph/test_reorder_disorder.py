"""The facts bench/disorder.py relies on: a consistent interleaving of 3D groups never
deadlocks, and one disordered pair deadlocks under single-queue but not under gloo."""

from __future__ import annotations

import random

import pytest

from commlint.graph.check import check_trace
from commlint.plans.io import trace_from_data


def grid_groups() -> dict[str, list[int]]:
    """TP and DP groups of a 2x2x2 grid (8 ranks, rank = 4*pp + 2*dp + tp)."""
    out = {}
    for pp in range(2):
        for dp in range(2):
            out[f"tp{pp}{dp}"] = [4 * pp + 2 * dp + t for t in range(2)]
        for tp in range(2):
            out[f"dp{pp}{tp}"] = [4 * pp + 2 * d + tp for d in range(2)]
    return out


def projected(seed: int, swap_ranks: tuple[int, ...] = ()) -> dict:
    rng = random.Random(seed)
    groups = grid_groups()
    plan = [g for g in groups for _ in range(6)]
    rng.shuffle(plan)
    seqs: dict[int, list[str]] = {r: [] for r in range(8)}
    for g in plan:
        for r in groups[g]:
            seqs[r].append(g)
    for swap_rank in swap_ranks:
        seq = seqs[swap_rank]
        i = next(k for k in range(len(seq) - 1) if seq[k] != seq[k + 1])
        seq[i], seq[i + 1] = seq[i + 1], seq[i]
    ranks = {
        r: [
            {"op": "all_reduce", "group": g, "async": True, "handle": f"h{i}"}
            for i, g in enumerate(s)
        ]
        + [{"op": "wait", "handles": [f"h{i}" for i in range(len(s))]}]
        for r, s in seqs.items()
    }
    return {"version": 1, "world_size": 8, "groups": groups, "ranks": ranks}


@pytest.mark.parametrize("seed", range(5))
def test_consistent_interleaving_never_deadlocks(seed):
    result = check_trace(trace_from_data(projected(seed)), "all")
    assert [f.code for f in result.findings] == []


def test_disorder_deadlocks_under_single_queue_never_under_gloo():
    """Each rank swaps its first two invocations on different groups. Disorder is necessary,
    not sufficient (DFCCL §2.3): a swap deadlocks only when the groups between the swapped
    pair chain back to it."""
    verdicts = []
    for seed in range(6):
        trace = trace_from_data(projected(seed, swap_ranks=tuple(range(8))))
        sq = {f.code for f in check_trace(trace, "single-queue", reorder=False).findings}
        gloo = {f.code for f in check_trace(trace, "gloo", reorder=False).findings}
        assert gloo == set()
        verdicts.append("CL201" in sq)
    assert any(verdicts)
