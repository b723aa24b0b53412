"""Overhead of the runtime guard on training steps (CPU, gloo, 4 ranks by default).

    python bench/guard_overhead.py [--steps 40] [--rounds 2] [--nproc 4] [--width 512]
        [--layers 4] [--workloads ddp,fsdp2,manual] [--modes ab,unguarded,guard,...]

The figure of record is `ab`: ONE guarded job whose ranks turn the guard on and off in
alternate blocks of 5 steps (`commlint.guard.installed().enabled`, the same step on every
rank; a block's first step is left out), so the same processes, on the same machine state,
measure both; each step's time is the slowest rank's (a step ends when every rank has
finished it), and its CPU time — every thread's, the guard's watchdog and answer threads included,
and the program thread's — summed over the ranks: on a machine with fewer cores than ranks a
step's wall time is mostly the wait for a core, and the CPU time is what the guard adds to it.
The other modes are separate jobs — unguarded,
under `-m commlint.guard` in its default mode, with `--check sample:10`, and with
`TORCH_DISTRIBUTED_DEBUG=DETAIL` — interleaved over `--rounds` rounds so machine noise hits all
alike; they also show what the guard's threads cost when it is "off" in the `ab` job.
Workloads (`--workloads`):
- `ddp`: DistributedDataParallel (bucketed gradient all-reduce) plus a loss all_reduce;
- `fsdp2`: every Linear and the root under `torch.distributed.fsdp.fully_shard` (an
  all-gather per layer in forward and backward, a reduce-scatter per layer) plus the loss
  all_reduce;
- `manual`: the same model with one `dist.all_reduce` per parameter gradient after backward —
  the guard's worst case (many small collectives, each recorded and fingerprinted).
In torch 2.13 (CPU build) DDP crashes under DETAIL (SIGSEGV in DDP's Logger at construction):
that cell says so; the `manual` workload gives the DETAIL comparison.
Each job's rank 0 prints its per-step times as one JSON line (`--worker` mode).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

try:
    from bench.guard_jobs import command, job_env
except ImportError:  # run as a script: bench/ itself is on sys.path
    from guard_jobs import command, job_env

MODES = ("ab", "unguarded", "guard", "guard-sample", "detail")
BLOCK = 5  # `ab`: steps per block with the guard on, then off
WARMUP = 10  # steps left out: DDP rebuilds its buckets, `--check auto` learns the paths


def worker(steps: int, width: int, layers: int, batch: int, workload: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    if workload == "ddp":
        model = DDP(model)
    elif workload == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    times: list[float] = []
    cpu: list[float] = []  # the process's CPU time (every thread: the guard's too)
    main_cpu: list[float] = []  # the program's thread only
    import commlint.guard

    guard = commlint.guard.installed() if os.environ.get("BENCH_TOGGLE") else None
    flags = []
    for step in range(steps + WARMUP):
        if guard is not None:
            # blocks of BLOCK steps on, BLOCK off; a block's first step is left out of both
            # figures (a block's first calls may still be learning a path, `--check auto`)
            guard.enabled = (step // BLOCK) % 2 == 0
            flags.append(None if step % BLOCK == 0 else guard.enabled)
        x = torch.randn(batch, width, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if workload == "manual":
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        opt.step()
        # a small all_reduce of the loss per step, as training loops log it
        flat = loss.detach().reshape(1)
        dist.all_reduce(flat)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        main_cpu.append(time.thread_time() - m0)
    # a step lasts as long as its slowest rank: gather every rank's times (unguarded: the guard
    # is off, or this collective after the last step is simply one more recorded call)
    if guard is not None:
        guard.enabled = False

    def gathered(values: list[float]) -> torch.Tensor:
        every = [torch.zeros(len(values), dtype=torch.float64) for _ in range(world)]
        dist.all_gather(every, torch.tensor(values, dtype=torch.float64))
        return torch.stack(every)

    slowest = gathered(times).max(dim=0).values.tolist()
    # CPU: what the job's ranks spent on the step together (on 2 shared cores under load, a
    # step's wall time is mostly waiting for a core; its CPU time is what the guard adds)
    cpu_sum = gathered(cpu).sum(dim=0).tolist()
    main_sum = gathered(main_cpu).sum(dim=0).tolist()
    if rank == 0:
        print(
            json.dumps(
                {
                    "times": slowest[WARMUP:],
                    "cpu": cpu_sum[WARMUP:],
                    "main_cpu": main_sum[WARMUP:],
                    "guarded": flags[WARMUP:],
                    "loss": float(flat),
                    "fp": [guard.fp_seconds, guard.fp_calls, guard.fp_trusted]
                    if guard is not None
                    else None,
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()


def launch(mode: str, workload: str, args: argparse.Namespace) -> dict | None:
    env = job_env()
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    guard: list[str] | None = None
    if mode == "detail":
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    elif mode == "guard":
        guard = []
    elif mode == "ab":
        guard = []
        env["BENCH_TOGGLE"] = "1"
    elif mode == "guard-sample":
        guard = ["--check", "sample:10"]
    worker = ["--worker", "--steps", str(args.steps), "--width", str(args.width)]
    worker += ["--layers", str(args.layers), "--batch", str(args.batch), "--workload", workload]
    cmd = command(Path(__file__).resolve(), worker, guard=guard, nproc=args.nproc)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    if mode == "detail" and proc.returncode != 0:
        return None  # torch's own crash under DETAIL (see the module docstring)
    raise RuntimeError(f"{mode} run failed (rc {proc.returncode}):\n{proc.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", default="ddp", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--workloads", default="ddp,fsdp2,manual")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.steps, args.width, args.layers, args.batch, args.workload)
        return 0
    modes = args.modes.split(",")
    loads = args.workloads.split(",")
    times: dict[tuple[str, str], list[float]] = {(w, m): [] for w in loads for m in modes}
    losses: dict[tuple[str, str], float] = {}
    crashed: set[tuple[str, str]] = set()
    ab_on: dict[str, list[float]] = {w: [] for w in loads}
    fp_cost: dict[str, list] = {w: [] for w in loads}
    ab_off: dict[str, list[float]] = {w: [] for w in loads}
    ab_cpu: dict[tuple[str, str, bool], list[float]] = {}
    for rnd in range(args.rounds):
        for w in loads:
            for mode in modes:
                if (w, mode) in crashed:
                    continue
                out = launch(mode, w, args)
                if out is None:
                    crashed.add((w, mode))
                    print(f"round {rnd + 1} {w:6} {mode:12} crashed (torch)", flush=True)
                    continue
                if mode == "ab":
                    fp_cost[w].append(out["fp"])
                    pairs = list(zip(out["times"], out["guarded"], strict=True))
                    ab_on[w] += [t for t, g in pairs if g is True]
                    ab_off[w] += [t for t, g in pairs if g is False]
                    for kind in ("cpu", "main_cpu"):
                        for t, g in zip(out[kind], out["guarded"], strict=True):
                            if g is not None:
                                ab_cpu.setdefault((w, kind, g), []).append(t)
                times[w, mode] += out["times"]
                losses[w, mode] = out["loss"]
                med = statistics.median(out["times"]) * 1e3
                print(f"round {rnd + 1} {w:6} {mode:12} median step {med:7.2f} ms", flush=True)
    params = args.layers * (args.width * args.width + args.width) + args.width * 10 + 10
    print(
        f"MLP {args.layers}x{args.width} ({params / 1e6:.2f} M parameters), batch {args.batch}, "
        f"{args.nproc} ranks, gloo, CPU; {args.steps} steps x {args.rounds} rounds per cell"
    )
    for w in loads:
        base_times = times[w, "unguarded"] if "unguarded" in modes else []
        base = statistics.median(base_times) if base_times else None
        if ab_on[w]:
            on, off = statistics.median(ab_on[w]), statistics.median(ab_off[w])
            print(
                f"{w:6} same job, guard on/off in alternate blocks: on {on * 1e3:7.2f} ms, "
                f"off {off * 1e3:7.2f} ms  x{on / off:.3f}  ({(on - off) * 1e3:+.2f} ms/step)"
            )
            for kind, what in (("cpu", "CPU of all threads"), ("main_cpu", "program thread")):
                con = statistics.median(ab_cpu[w, kind, True])
                coff = statistics.median(ab_cpu[w, kind, False])
                print(
                    f"{w:6} same job, {what}, summed over ranks: on {con * 1e3:7.2f} ms, "
                    f"off {coff * 1e3:7.2f} ms  x{con / coff:.3f}  ({(con - coff) * 1e3:+.2f} ms)"
                )
            secs = sum(c[0] for c in fp_cost[w] if c)
            calls = sum(c[1] for c in fp_cost[w] if c)
            trusted = sum(c[2] for c in fp_cost[w] if c)
            if calls:
                print(
                    f"{w:6} fingerprint check (side channel): {secs / calls * 1e3:.3f} ms "
                    f"per checked call over {calls} calls on rank 0, {trusted} of them only "
                    "recorded (--check auto: a path already seen matched)"
                )
        for mode in modes:
            if mode == "ab":
                continue
            if (w, mode) in crashed:
                print(f"{w:6} {mode:12} crashed: SIGSEGV inside torch (DDP under DETAIL)")
                continue
            med = statistics.median(times[w, mode])
            q = statistics.quantiles(times[w, mode], n=4)
            ratio = f"  x{med / base:.3f} vs unguarded" if base else ""
            print(
                f"{w:6} {mode:12} median {med * 1e3:7.2f} ms (quartiles {q[0] * 1e3:.2f}-"
                f"{q[2] * 1e3:.2f} ms)  final loss {losses[w, mode]:.6f}{ratio}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
