"""Rank classes at scale (issue 33 item 2): `commlint run --rank-classes` on a 4,096-rank
program laid out as torchtitan lays out Llama (pp × dp_shard × cp × tp, `bench/titan_layout.py`)
in which the first rank of one pipeline stage alone issues an all-reduce.

Prints the verdict (the finding that names that rank), how many ranks were recorded and how
many derived, the CPU seconds and peak memory of each recorded rank, and the parent's CPU
seconds for deriving the other ranks and for checking the trace. CPU seconds, not wall: the
machine is shared.

    python bench/dryrun_classes.py                 # 4,096 ranks: pp 8, dp_shard 32, cp 2, tp 8
    python bench/dryrun_classes.py --pp 4 --dp-shard 2 --cp 2 --tp 4   # 64 ranks
    python bench/dryrun_classes.py --device-mesh   # the groups of init_device_mesh
    python bench/dryrun_classes.py --modules       # torch's own FSDP2, TP and pipelining
    python bench/dryrun_classes.py --modules --correct   # the same without the bug: exit 0

`--modules` runs `bench/titan_real.py` instead: the same mesh from `init_device_mesh`, with
torch's `fully_shard` over dp_shard x cp, `parallelize_module` over tp and a `PipelineStage`
with a `ScheduleGPipe` over pp. `--correct` leaves the bug out. The exit code is the
verdict's, as `commlint run`'s: 0 without an error finding, 1 with one.

Also printed: each recorded rank's CPU seconds and peak RSS, the CPU seconds of the whole run
(the parent and every rank process), the commit and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

PROGRAM = Path(__file__).with_name("titan_layout.py")
MODULES = Path(__file__).with_name("titan_real.py")


def cpu(who: int) -> float:
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, default=8)
    p.add_argument("--dp-shard", type=int, default=32)
    p.add_argument("--cp", type=int, default=2)
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--nproc-per-node", type=int, default=8)
    p.add_argument("--bug-stage", type=int, default=3)
    p.add_argument("--correct", action="store_true", help="the program without the bug")
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.add_argument("--device-mesh", action="store_true", help="groups from init_device_mesh")
    p.add_argument("--modules", action="store_true", help="torch's FSDP2, TP and pipelining")
    p.add_argument("--timeout", type=float, default=120, help="per rank and pass (CPU s)")
    a = p.parse_args()

    from revision import describe  # bench/revision.py: this script's folder is on sys.path

    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run
    from commlint.plans.dryrun.merge import locate_at_site

    world = a.pp * a.dp_shard * a.cp * a.tp
    bug_rank = a.bug_stage * a.dp_shard * a.cp * a.tp  # coordinates (S, 0, 0, 0)
    print(f"commit {describe('HEAD')}, load average before {_load()}", flush=True)
    options = DryRunOptions(
        program=str(MODULES if a.modules else PROGRAM),
        args=[
            *("--pp", str(a.pp), "--dp-shard", str(a.dp_shard), "--cp", str(a.cp)),
            *("--tp", str(a.tp)),
            *(() if a.correct else ("--bug-stage", str(a.bug_stage))),
            *(("--device-mesh",) if a.device_mesh and not a.modules else ()),
        ],
        timeout=a.timeout,
        world_size=world,
        nproc_per_node=a.nproc_per_node,
        ranks=list(range(world)),
        jobs=a.jobs,
        rank_classes=True,
    )
    wall0, parent0 = time.monotonic(), cpu(resource.RUSAGE_SELF)
    result = dry_run(options)
    wall1, parent1 = time.monotonic(), cpu(resource.RUSAGE_SELF)
    trace = result.trace(options)
    findings = check_trace(trace, None).findings
    for f in findings:
        locate_at_site(f, trace)
    parent2 = cpu(resource.RUSAGE_SELF)
    recorded = sorted(r for r in result.runs if r not in result.derived)
    runs = [result.runs[r] for r in recorded]
    cpus = [r.cpu_seconds for r in runs if r.cpu_seconds is not None]
    peaks = [r.peak_bytes for r in runs if r.peak_bytes]
    actions = sum(len(r) for r in trace.ranks.values())
    bug = f"rank {bug_rank} (first rank of stage {a.bug_stage})"
    bug = "none (--correct)" if a.correct else bug
    print(f"world {world} (pp {a.pp} x dp_shard {a.dp_shard} x cp {a.cp} x tp {a.tp}), bug: {bug}")
    print(f"ranks recorded {len(recorded)}, derived {len(result.derived)}; {actions} actions")
    for note in result.notes[:4]:
        print(f"note: {note}")
    errors = [f for f in findings if f.severity == "error"]
    print(f"verdict: {len(errors)} error(s): {sorted({f.code for f in errors})}")
    for f in errors[:3]:
        print(f"  {f.code} at {Path(f.path or '').name}:{f.line}: {f.message[:300]}")
    if not a.correct:
        named = [f for f in errors if str(bug_rank) in f.message and f.line is not None]
        print(f"bug rank recorded itself: {bug_rank in recorded}; named: {bool(named)}")
    print("recorded rank: CPU s, peak RSS MB")
    print(
        "  "
        + "; ".join(
            f"{r}: {run.cpu_seconds or 0:.2f}, {(run.peak_bytes or 0) / 2**20:.0f}"
            for r, run in zip(recorded, runs, strict=True)
        )
    )
    print(
        f"CPU s per recorded rank: mean {statistics.mean(cpus):.2f}, max {max(cpus):.2f}, "
        f"sum {sum(cpus):.1f}; peak RSS per recorded rank: max {max(peaks) / 2**20:.0f} MB, "
        f"median {statistics.median(peaks) / 2**20:.0f} MB"
    )
    print(
        f"parent CPU s: dry-run (warm-up, scheduling, derivation) {parent1 - parent0:.1f}, "
        f"check {parent2 - parent1:.1f}; wall {wall1 - wall0:.0f} s; parent peak RSS "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )
    every = cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN)
    print(f"CPU s in all (the parent and every rank process): {every:.1f}")
    print(
        f"recording every rank instead: about {statistics.mean(cpus) * world:.0f} CPU s "
        f"({world} x the mean above)"
    )
    print(f"load average after {_load()}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
