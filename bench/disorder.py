"""DFCCL-style disorder simulation with the real checker (issue 6; DFCCL §2.4, Table 1).

3D grouping as DFCCL's: TP, DP, PP sizes 4, 4, 4 on 64 ranks (rank = 16·pp + 4·dp + tp).
Each TP and DP group has its own list of collectives (TP: N, DP: 3N, as DFCCL's 400/1200);
with `--overlap 3` the PP groups get N collectives too, so every rank serves three groups
instead of two. A round: one global random interleaving of all groups' collectives (so every
rank's projection is consistent: deadlock-free by construction); then every rank, at each of
its invocations, with probability `p` swaps it with its next invocation on another group
(disorder); with probability `q` a device `sync` follows an invocation. Collectives are async
and each rank waits for all of them at the end, as a step does.

Each round's trace goes through `commlint.graph.check_trace(trace, model, reorder=False)` for
model single-queue (DFCCL's single-queue model), gloo (independent progress per group), and
nccl (one stream per group; a `sync` waits for everything outstanding: DFCCL's
synchronisation model); a round deadlocks when the checker reports CL201.

    nice -n 10 python bench/disorder.py                 # the default table (~2-4 minutes)
    nice -n 10 python bench/disorder.py --rounds 50     # quicker, noisier
    nice -n 10 python bench/disorder.py --markdown      # the table for docs/nondeterminism.md
"""

from __future__ import annotations

import argparse
import random
import time

from commlint.graph.check import check_trace
from commlint.plans.io import trace_from_data

MODELS = ("single-queue", "gloo", "nccl")
TP = DP = PP = 4


def groups(overlap: int) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Group members, and which groups get collectives with what weight (TP 1, DP 3, PP 1)."""
    out: dict[str, list[int]] = {}
    weight: dict[str, int] = {}
    for pp in range(PP):
        for dp in range(DP):
            out[f"tp{pp}_{dp}"] = [16 * pp + 4 * dp + t for t in range(TP)]
            weight[f"tp{pp}_{dp}"] = 1
        for tp in range(TP):
            out[f"dp{pp}_{tp}"] = [16 * pp + 4 * d + tp for d in range(DP)]
            weight[f"dp{pp}_{tp}"] = 3
    if overlap >= 3:
        for dp in range(DP):
            for tp in range(TP):
                out[f"pp{dp}_{tp}"] = [16 * p + 4 * dp + tp for p in range(PP)]
                weight[f"pp{dp}_{tp}"] = 1
    return out, weight


def make_round(rng: random.Random, n: int, p: float, q: float, overlap: int) -> tuple[dict, int]:
    members, weight = groups(overlap)
    plan = [g for g, w in weight.items() for _ in range(n * w)]
    rng.shuffle(plan)  # one global order: every rank's projection agrees
    seqs: dict[int, list[str]] = {r: [] for r in range(TP * DP * PP)}
    for g in plan:
        for r in members[g]:
            seqs[r].append(g)
    swaps = 0
    ranks = {}
    for r, seq in seqs.items():
        for i in range(len(seq) - 1):
            if seq[i] != seq[i + 1] and rng.random() < p:
                seq[i], seq[i + 1] = seq[i + 1], seq[i]
                swaps += 1
        acts = []
        for i, g in enumerate(seq):
            acts.append({"op": "all_reduce", "group": g, "async": True, "handle": f"h{i}"})
            if q and rng.random() < q:
                acts.append({"op": "sync"})
        acts.append({"op": "wait", "handles": [f"h{i}" for i in range(len(seq))]})
        ranks[r] = acts
    data = {"version": 1, "world_size": TP * DP * PP, "groups": members, "ranks": ranks}
    return data, swaps


def ratio(rounds: int, n: int, p: float, q: float, overlap: int, seed: int) -> dict[str, float]:
    """Deadlock ratio per model, and `swaps`: disordered invocations per round."""
    rng = random.Random(seed)
    hits = dict.fromkeys(MODELS, 0)
    total_swaps = 0
    for _ in range(rounds):
        data, swaps = make_round(rng, n, p, q, overlap)
        total_swaps += swaps
        if not swaps:
            continue  # a consistent order never deadlocks (checked in tests/graph)
        trace = trace_from_data(data)
        for m in MODELS:
            if any(f.code == "CL201" for f in check_trace(trace, m, reorder=False).findings):
                hits[m] += 1
    return {**{m: hits[m] / rounds for m in MODELS}, "swaps": total_swaps / rounds}


CONFIGS = [  # (label, collectives per TP group N, disorder p, sync q, overlap)
    ("base", 10, 2.5e-4, 0.0, 2),
    ("p x4", 10, 1e-3, 0.0, 2),
    ("p x16", 10, 4e-3, 0.0, 2),
    ("N x4", 40, 2.5e-4, 0.0, 2),
    ("overlap 3", 10, 2.5e-4, 0.0, 3),
    ("sync 0.1", 10, 4e-3, 0.1, 2),
    ("sync 0.3", 10, 4e-3, 0.3, 2),
    ("sync 0.6", 10, 4e-3, 0.6, 2),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.markdown:
        print(
            "| config | N (TP) / 3N (DP) per group | disorder p | sync q | groups per rank | "
            "swaps / round | single-queue | gloo | nccl (sync model) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
    else:
        print(f"64 ranks, TP=DP=PP=4, {args.rounds} rounds per row, seed {args.seed}")
        print(
            f"{'config':10s} {'N':>4s} {'p':>8s} {'q':>7s} {'ovl':>3s}  "
            f"{'swaps':>5s} {'single-queue':>12s} {'gloo':>6s} {'nccl':>6s}   time"
        )
    for label, n, p, q, overlap in CONFIGS:
        t0 = time.perf_counter()
        r = ratio(args.rounds, n, p, q, overlap, args.seed)
        dt = time.perf_counter() - t0
        if args.markdown:
            print(
                f"| {label} | {n} / {3 * n} | {p:g} | {q:g} | {overlap} | {r['swaps']:.1f} | "
                f"{r['single-queue']:.0%} | {r['gloo']:.0%} | {r['nccl']:.0%} |"
            )
        else:
            print(
                f"{label:10s} {n:4d} {p:8.0e} {q:7.0e} {overlap:3d}  {r['swaps']:5.1f} "
                f"{r['single-queue']:12.1%} {r['gloo']:6.1%} {r['nccl']:6.1%}   {dt:5.1f} s"
            )


if __name__ == "__main__":
    main()
