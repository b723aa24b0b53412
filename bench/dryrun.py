"""Dry-run cost for a GPT-2-small-like model (12 layers, hidden 768): DDP and TP=2×DP, W=8, 64.

Prints, per configuration: wall time of the whole dry-run, wall and CPU seconds per rank (CPU
is what counts on a shared machine), passes, actions recorded, and the peak resident memory of
one rank (most of it is torch itself, shared with the parent after fork), and the load
average when the configuration ended (the machine is shared: CPU seconds inflate too when
both cores' neighbours are busy). Goals: ≤ 2 s per rank at W=8; W=64 in ≤ 60 s in total.

    nice -n 10 python bench/dryrun.py            # all four configurations
    nice -n 10 python bench/dryrun.py --worlds 8 --configs ddp
    nice -n 10 python bench/dryrun.py --model llama3-8b   # FSDP2 + TP=2, W=8

`--model llama3-8b` (bench/dryrun_llama.py: 32 layers, hidden 4,096, GQA, SwiGLU 14,336,
vocabulary 128,256) with FSDP2 + TP=2 at W=8: goals ≤ 5 CPU s and ≤ 1.5 GB per rank.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROGRAMS = {"gpt2": ROOT / "dryrun_gpt2.py", "llama3-8b": ROOT / "dryrun_llama.py"}
# per model: (worlds, configs, CPU s per rank at W<=8, peak MB per rank or None)
DEFAULTS = {"gpt2": ("8,64", "ddp,tp-dp", 2.0, None), "llama3-8b": ("8", "tp-dp", 5.0, 1536.0)}


def _ranks(world: int, sample: int) -> list[int]:
    if not sample or sample >= world:
        return list(range(world))
    return sorted({round(i * (world - 1) / (sample - 1)) for i in range(sample)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(PROGRAMS), default="gpt2")
    parser.add_argument("--worlds", default=None, help="default: 8,64 (gpt2), 8 (llama3-8b)")
    parser.add_argument(
        "--configs",
        default=None,
        help="comma-separated (default: ddp,tp-dp for gpt2, tp-dp for llama3-8b); "
        "`+print-loss` adds a rank-0 print of loss.item() every step "
        "(e.g. ddp,ddp+print-loss: the second is compared to the first, its peer)",
    )
    parser.add_argument("-j", "--jobs", type=int, default=None, help="default: every CPU")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--sample",
        type=int,
        default=0,
        help="record only this many evenly spaced ranks of each world and project the total "
        "for idle cores (start-up + W × CPU per rank / jobs); 0 records every rank",
    )
    args = parser.parse_args()
    worlds, configs, cpu_goal, peak_goal = DEFAULTS[args.model]
    args.worlds = args.worlds or worlds
    args.configs = args.configs or configs

    start = time.monotonic()
    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.driver import DryRunOptions, default_jobs, dry_run
    from commlint.plans.dryrun.warm import warm_up

    args.jobs = args.jobs or default_jobs()
    warm_up("fake")
    startup = time.monotonic() - start
    print(f"parent start-up (import torch, warm fake tensors): {startup:.1f} s")
    print(f"jobs: {args.jobs}   load average: {os.getloadavg()[0]:.1f}")
    header = (
        f"{'config':8} {'W':>4} {'total s':>8} {'wall/rank':>10} {'cpu/rank':>9} "
        f"{'cpu max':>8} {'passes':>6} {'actions':>8} {'peak MB':>8} {'findings':>8} "
        f"{'load':>5}  goal"
    )
    print(header)
    print("-" * len(header))
    for world in [int(w) for w in args.worlds.split(",")]:
        peer: tuple[str, float, float] | None = None
        for config in args.configs.split(","):
            parallel, _, extra = config.partition("+")
            options = DryRunOptions(
                program=str(PROGRAMS[args.model]),
                args=["--parallel", parallel, "--steps", "2"] + (["--" + extra] if extra else []),
                world_size=world,
                nproc_per_node=8,
                ranks=_ranks(world, args.sample),
                timeout=args.timeout,
                jobs=args.jobs,
            )
            t0 = time.monotonic()
            result = dry_run(options)
            total = time.monotonic() - t0
            trace = result.trace(options)
            sampled = len(options.ranks) < world
            findings = [] if sampled else check_trace(trace, None).findings
            runs = list(result.runs.values())
            cpu = [r.cpu_seconds for r in runs if r.cpu_seconds is not None]
            wall = statistics.mean(r.seconds for r in runs)
            peak = max((r.peak_bytes or 0) for r in runs) / 2**20
            cpu_mean = statistics.mean(cpu) if cpu else float("nan")
            projected = startup + world * cpu_mean / args.jobs
            ended = sum(1 for r in runs if r.end)
            stopped = result.incomplete()
            if world <= 8:
                # a run whose ranks ended early (a crash, a stop) meets nothing, however fast
                met = cpu_mean <= cpu_goal and (peak_goal is None or peak <= peak_goal)
                met = met and not ended and not stopped
                goal = f"cpu/rank {cpu_mean:.2f} s vs {cpu_goal:g} s"
                if peak_goal is not None:
                    goal += f", peak {peak:.0f} MB vs {peak_goal:.0f} MB"
                goal += f": {'met' if met else 'missed'}"
            elif len(options.ranks) < world:
                goal = (
                    f"projected total on idle cores {projected:.0f} s vs 60 s: "
                    f"{'met' if projected <= 60 else 'missed'} ({len(options.ranks)} ranks sampled)"
                )
            else:
                goal = (
                    f"total {total:.0f} s vs 60 s: {'met' if total <= 60 else 'missed'}; "
                    f"on idle cores {projected:.0f} s"
                )
            print(
                f"{config:8} {world:>4} {total:>8.1f} {wall:>10.2f} {cpu_mean:>9.2f} "
                f"{max(cpu or [0]):>8.2f} {result.passes:>6} {trace.num_actions():>8} "
                f"{peak:>8.0f} {'-' if sampled else len(findings):>8} "
                f"{os.getloadavg()[0]:>5.1f}  {goal}"
                + (f"  [{ended} ranks ended early, tensors={result.mode}]" if ended else "")
                + (f"  [incomplete: {len(stopped)} ranks]" if stopped else "")
            )
            if peer is None:
                peer = (config, cpu_mean, peak)
            else:
                print(
                    f"  {config} vs {peer[0]} (peer, same process): cpu/rank ×"
                    f"{cpu_mean / peer[1]:.2f}, peak RSS ×{peak / peer[2]:.2f}, "
                    f"tensors={result.mode}"
                )
            sys.stdout.flush()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"parent peak RSS: {own:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
