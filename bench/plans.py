"""Plan gate speed: generate + check parallel plans (issue 5).

1. The issue's plan: 1F1B, pp=8, tp=8, dp=16 (1,024 ranks), 64 microbatches, Megatron p2p —
   generated from its `generate:` block and checked under the trace's model (nccl).
   Goal: <= 0.25 s for generate + check (issue 12; issue 5 asked for 1 s). Ranks are built
   on first access (commlint.plans.lazy): a clean symmetric plan builds its representatives.
2. Plans per second for a 64-rank plan (tp=2, pp=4, dp=8, 1F1B, 16 microbatches), the unit a
   plan search loop calls: a fresh generate + check each time. Goal: >= 50 plans/s.

Prints each figure with its split (generate / check) and the ratio to the goal, and beside it
a peer run in the same process: the same plan checked on every rank (`symmetry=False`), so the
gain of checking one rank per orbit (commlint.graph.symmetry) is a measured ratio. A broken
1,024-rank plan (head-to-head sends) shows the cost when findings must name every rank: the
quotient finds the deadlock, then the whole trace is checked for the report.

    nice -n 10 python bench/plans.py              # both
    nice -n 10 python bench/plans.py --profile    # plus cProfile's top lines of the check
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import sys
import time

from commlint.graph.check import check_trace
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
BIG_GOAL_S = 0.25
SMALL_GOAL_PER_S = 50.0


BROKEN = BIG.rstrip("}\n") + ", mutations: [{kind: head_to_head, stage: 3}]}\n"


def timed(text: str, symmetry: bool | str = True) -> tuple[float, float, int, int]:
    """Seconds of CPU this process spent generating and checking (on a shared machine the
    wall clock also counts other people's jobs; `wall` is printed next to it)."""
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    trace = loads_trace(text)
    c1 = time.process_time()
    result = check_trace(trace, None, symmetry=symmetry)
    c2, w2 = time.process_time(), time.perf_counter()
    _WALL.append(w2 - w0)
    return c1 - c0, c2 - c1, trace.num_actions(), len(result.findings)


_WALL: list[float] = []


def big(runs: int = 2) -> None:
    _WALL.clear()
    best = min((timed(BIG) for _ in range(runs)), key=lambda r: r[0] + r[1])
    wall = min(_WALL)
    gen, chk, actions, findings = best
    total = gen + chk
    print("1,024 ranks (tp=8 pp=8 dp=16, 1F1B, 64 microbatches, megatron p2p, model nccl)")
    print(f"  actions      {actions:,}   findings {findings}")
    print(f"  generate     {gen:.3f} s   ({actions / gen:,.0f} actions/s)")
    print(f"  check        {chk:.3f} s   (one rank per orbit: 8 of 1,024)")
    ratio = total / BIG_GOAL_S
    print(f"  total        {total:.3f} s   goal <= {BIG_GOAL_S:.2f} s   ratio {ratio:.2f}x")
    print(f"  (CPU seconds of this process; wall clock of the best run {wall:.3f} s)")
    _, peer, _, peer_findings = timed(BIG, symmetry=False)
    assert peer_findings == findings
    print(
        f"  peer: every rank checked  {peer:.3f} s ({actions / peer:,.0f} actions/s)   "
        f"check {peer / chk:.0f}x faster, generate + check {(gen + peer) / total:.1f}x"
    )
    for mode, how in ((True, "quotient, then every rank"), ("orbits", "symmetry='orbits'")):
        gen, chk, actions, findings = timed(BROKEN, symmetry=mode)
        print(
            f"  broken plan (head-to-head at stage 3, {how}): generate {gen:.3f} s + check "
            f"{chk:.3f} s = {gen + chk:.3f} s, {findings} findings"
        )


def small(seconds: float = 3.0) -> None:
    gen_t = chk_t = 0.0
    n = 0
    actions = 0
    start = time.perf_counter()
    _WALL.clear()
    while time.perf_counter() - start < seconds or n < 5:
        gen, chk, actions, _ = timed(SMALL)
        gen_t += gen
        chk_t += chk
        n += 1
    wall = sum(_WALL)
    peer_n, peer_gen, peer_chk = 5, 0.0, 0.0
    for _ in range(peer_n):
        g, c, _, _ = timed(SMALL, symmetry=False)
        peer_gen += g
        peer_chk += c
    peer_rate = peer_n / (peer_gen + peer_chk)
    rate = n / (gen_t + chk_t)
    print("64 ranks (tp=2 pp=4 dp=8, 1F1B, 16 microbatches), generate + check per plan")
    print(f"  actions      {actions:,} per plan, {n} plans")
    print(f"  generate     {gen_t / n * 1000:.1f} ms/plan")
    print(f"  check        {chk_t / n * 1000:.1f} ms/plan")
    print(
        f"  throughput   {rate:.1f} plans/s   goal >= {SMALL_GOAL_PER_S:.0f}/s   "
        f"ratio {rate / SMALL_GOAL_PER_S:.2f}x   (CPU time; wall {n / wall:.1f}/s)"
    )
    print(
        f"  peer: every rank checked  {peer_rate:.1f} plans/s "
        f"(check {peer_chk / peer_n * 1000:.1f} ms/plan): {rate / peer_rate:.1f}x"
    )


def profile() -> None:
    trace = loads_trace(BIG)
    prof = cProfile.Profile()
    prof.enable()
    check_trace(trace, None)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    print("cProfile of check_trace on the 1,024-rank plan (top 12 by own time):")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:4000])


def main(argv: list[str]) -> int:
    big()
    print()
    small()
    if "--profile" in argv:
        print()
        profile()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
