"""Pipelining CSV speed: commlint's import + lowering against torch's own lowering (issue 12).

The schedule is torch's: `ScheduleInterleaved1F1B` (and `ScheduleLoopedBFS`) for pp=16 ranks,
2 stages per rank, 256 microbatches, built by torch's classes and written with their own
`_dump_csv` (compute_only and compute_comms). The peer, in this same process: torch's
`_add_send_recv` (the lowering `_PipelineScheduleRuntime` runs on a compute-only schedule)
and `_add_send_recv` + `_simulate_comms_compute` (torch's own schedule check). commlint reads
the CSV file from disk, lowers it, builds the `Trace` (import), then checks it under gloo.

Prints each figure (best of N, CPU seconds of this process) and the ratio to the peer;
commlint's import + lowering must be at least as fast as torch's `_add_send_recv` (ratio <= 1)
although it also parses the file and builds the trace.

    nice -n 10 python bench/pipelining.py [--pp 16] [--microbatches 256] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from torch.distributed.pipelining import schedules as ts
from torch_stage import MockStage  # bench/ is this script's folder

from commlint.graph.check import check_trace
from commlint.plans.importers.pipelining_csv import (
    load_pipelining_csv,
    lower_compute_only,
    read_csv,
)


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def run(name: str, pp: int, microbatches: int, repeat: int, folder: Path) -> None:
    stages = [MockStage(0, 2 * pp, pp), MockStage(pp, 2 * pp, pp)]
    sched = getattr(ts, name)(stages, n_microbatches=microbatches)
    compute = folder / f"{name}.compute_only.csv"
    comms = folder / f"{name}.compute_comms.csv"
    sched._dump_csv(str(compute), "compute_only")
    sched._dump_csv(str(comms), "compute_comms")
    order = {r: [a for a in acts if a is not None] for r, acts in sched.pipeline_order.items()}
    num_stages = 2 * pp

    def stage_to_rank(s: int) -> int:
        return s % pp

    def torch_lower() -> dict:
        return ts._add_send_recv({r: list(a) for r, a in order.items()}, stage_to_rank, num_stages)

    lowered = torch_lower()

    def torch_prepare() -> dict:
        """All of torch's lowering of this compute-only CSV (`_prepare_schedule_with_comms`):
        FSDP steps, then `_add_send_recv` — the same work commlint's lowering does."""
        with_fsdp = {
            r: ts._add_reduce_grad(ts._add_unshard_reshard(list(a)), microbatches)
            for r, a in order.items()
        }
        return ts._add_send_recv(with_fsdp, stage_to_rank, num_stages)

    def torch_lower_simulate() -> None:
        ts._simulate_comms_compute(torch_lower(), stage_to_rank, num_stages)

    trace = load_pipelining_csv(compute)
    cells = sum(len(a) for a in order.values())
    print(
        f"{name}: pp={pp}, {num_stages} stages, {microbatches} microbatches — {cells:,} compute "
        f"cells, {sum(len(a) for a in lowered.values()):,} after lowering, "
        f"{trace.num_actions():,} trace actions"
    )
    t_lower = best(torch_lower, repeat)
    t_sim = best(torch_lower_simulate, repeat)
    t_prepare = best(torch_prepare, 1)
    t_ours = best(lambda: load_pipelining_csv(compute), repeat)
    t_schedule = best(lambda: lower_compute_only(read_csv(compute.read_text())), repeat)
    t_comms = best(lambda: load_pipelining_csv(comms), repeat)
    t_check = best(lambda: check_trace(trace, "gloo"), max(1, repeat // 2))
    print(f"  torch _add_send_recv                      {t_lower:7.3f} s")
    print(f"  torch _add_send_recv + _simulate          {t_sim:7.3f} s")
    print(f"  torch FSDP steps + _add_send_recv         {t_prepare:7.3f} s   (its full lowering)")
    print(
        f"  commlint import + lowering (compute_only) {t_ours:7.3f} s   "
        f"ratio to _add_send_recv {t_ours / t_lower:.2f}x (goal <= 1), to torch's full "
        f"lowering {t_ours / t_prepare:.3f}x"
    )
    print(f"  commlint read + lowering (no trace)       {t_schedule:7.3f} s")
    print(f"  commlint import (compute_comms CSV)       {t_comms:7.3f} s")
    print(
        f"  commlint import + lowering + check (gloo) {t_ours + t_check:7.3f} s   "
        f"ratio to _add_send_recv + _simulate {(t_ours + t_check) / t_sim:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS"):
            run(name, args.pp, args.microbatches, args.repeat, Path(tmp))
    print("(CPU seconds of this process, best of the runs; the peer runs in this same process)")


if __name__ == "__main__":
    main()
