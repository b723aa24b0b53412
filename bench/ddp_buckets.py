"""DDP bucket fusion vs exposure to reordering deadlocks (issue 6; dl2 Table 3 in spirit).

Runs real torch DDP on CPU/gloo (2 ranks, one launch) for a small MLP with each
`bucket_cap_mb` of BUCKET_CAPS. A DDP comm hook records, per rank and iteration, every fused
all-reduce DDP launches (bucket index, size); a gradient hook on the first layer's weight
issues an extra async all-reduce on a second process group (as user code that syncs a
statistic from a hook does) and records where in the bucket sequence it went out. From the
third iteration (after DDP rebuilt its buckets) a trace is built per cap — the fused
all-reduces as `bucket` ops, the hook's op with the bucket of its parameter — and checked
with `commlint.graph.check_trace(..., "all")` for CL209.

    nice -n 10 python bench/ddp_buckets.py              # prints the table
    nice -n 10 python bench/ddp_buckets.py --markdown   # the table for docs/nondeterminism.md

Model: 16 x Linear(512, 512) (1 MiB of fp32 weights each, ~16.5 MiB in all), so caps of
1, 2, 4, 8 and 64 MB give many to few buckets as the 25 MB default does for a ~400 MB model.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUCKET_CAPS = (1, 2, 4, 8, 64)
LAYERS = 16
WIDTH = 512
ITERATIONS = 3
WORLD = 2


def _worker(rank: int, port: int, out: str, caps: tuple[int, ...] = BUCKET_CAPS) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    timeout = timedelta(seconds=60)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timeout)
    aux = dist.new_group(list(range(WORLD)), timeout=timeout)
    results = {}
    for cap in caps:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
        ddp = DDP(model, bucket_cap_mb=cap)
        events: list[tuple] = []
        pending: list = []
        first_weight = model[0].weight

        def comm_hook(state, bucket, events=events, first_weight=first_weight):
            params = bucket.parameters()
            holds = any(p is first_weight for p in params)
            events.append(("bucket", bucket.index(), bucket.buffer().numel() * 4, holds))
            fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
            return fut.then(lambda f: f.value()[0].div_(WORLD))

        def grad_hook(grad, events=events, pending=pending):
            stat = grad.norm().reshape(1)
            pending.append(dist.all_reduce(stat, group=aux, async_op=True))
            events.append(("hook",))
            return grad

        ddp.register_comm_hook(None, comm_hook)
        handle = first_weight.register_hook(grad_hook)
        per_iter = []
        for _ in range(ITERATIONS):
            events.clear()
            ddp.zero_grad()
            ddp(torch.randn(8, WIDTH)).sum().backward()
            for w in pending:
                w.wait()
            pending.clear()
            per_iter.append(list(events))
        handle.remove()
        results[str(cap)] = per_iter
    Path(out).write_text(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)  # gloo's shutdown can race after every rank finished; the file says enough


def _free_port() -> int:
    """A port nobody listens on now (the OS picks it); a fixed formula collided between runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(caps: tuple[int, ...] = BUCKET_CAPS, timeout: float = 240.0) -> dict:
    """Per rank, per cap: the events of every iteration (one launch of WORLD processes).

    Each rank is a fresh interpreter (not a fork of the caller, whose torch thread pools may
    be mid-use: a forked child can hang in them); a rank that does not finish within
    `timeout` seconds is killed and the call raises with every rank's stderr.
    """
    port = _free_port()
    scratch = Path(tempfile.mkdtemp(prefix="commlint-ddp-buckets-"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    try:
        for r in range(WORLD):
            cmd = [sys.executable, __file__, "--worker", str(r), str(port)]
            cmd += [str(scratch / f"{r}.json"), ",".join(map(str, caps))]
            err = open(scratch / f"{r}.err", "w")  # noqa: SIM115  (closed below)
            procs.append((subprocess.Popen(cmd, stdout=err, stderr=err, env=env), err))
        deadline = time.monotonic() + timeout
        for p, _ in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        got = {}
        for r in range(WORLD):
            out = scratch / f"{r}.json"
            if not out.exists():
                tails = "; ".join(
                    f"rank {k}: {(scratch / f'{k}.err').read_text()[-400:]!r}" for k in range(WORLD)
                )
                raise RuntimeError(f"rank {r} recorded nothing within {timeout:.0f} s ({tails})")
            got[r] = {int(k): v for k, v in json.loads(out.read_text()).items()}
        return got
    finally:
        for p, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        shutil.rmtree(scratch, ignore_errors=True)


def trace_for(events: list[tuple]) -> dict:
    """The step as rank-local actions: fused all-reduces on dp, the hook's op on aux."""
    hook_bucket = next(e[1] for e in events if e[0] == "bucket" and e[3])
    acts, handles = [], []
    for k, e in enumerate(events):
        if e[0] == "bucket":
            acts.append(
                {
                    "op": "all_reduce",
                    "group": "dp",
                    "async": True,
                    "handle": f"b{e[1]}",
                    "bucket": e[1],
                    "bytes": e[2],
                    "label": f"DDP bucket {e[1]}",
                }
            )
            handles.append(f"b{e[1]}")
        else:
            acts.append(
                {
                    "op": "all_reduce",
                    "group": "aux",
                    "async": True,
                    "handle": f"h{k}",
                    "bucket": hook_bucket,
                    "bytes": 4,
                    "site": "bench/ddp_buckets.py:grad_hook",
                }
            )
            handles.append(f"h{k}")
    acts.append({"op": "wait", "handles": handles, "label": "end of step"})
    return acts


def table(recorded: dict, caps: tuple[int, ...] = BUCKET_CAPS) -> list[dict]:
    from commlint.graph.check import check_trace
    from commlint.plans.io import trace_from_data

    rows = []
    for cap in caps:
        ranks = {r: trace_for(recorded[r][cap][-1]) for r in range(WORLD)}
        events = recorded[0][cap][-1]
        fused = sum(e[0] == "bucket" for e in events)
        hook_bucket = next(e[1] for e in events if e[0] == "bucket" and e[3])
        order = [e[1] for e in events if e[0] == "bucket"]
        positions = order.index(hook_bucket) + 1  # the hook op may go out before any of these
        trace = trace_from_data(
            {
                "version": 1,
                "world_size": WORLD,
                "groups": {"dp": [0, 1], "aux": [0, 1]},
                "ranks": ranks,
                "backend": "gloo",
                "source": "bench/ddp_buckets.py",
            }
        )
        t0 = time.perf_counter()
        res = check_trace(trace, "all")
        dt = time.perf_counter() - t0
        models = sorted({m for f in res.findings if f.code == "CL209" for m in f.models or ()})
        rows.append(
            {
                "cap": cap,
                "fused": fused,
                "positions": positions,
                "models": models,
                "errors": [f.code for f in res.findings if f.severity == "error"],
                "ms": dt * 1000,
            }
        )
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        rank, port, out, caps = sys.argv[2:6]
        _worker(int(rank), int(port), out, tuple(int(c) for c in caps.split(",")))
        return
    t0 = time.perf_counter()
    recorded = record()
    print(
        f"recorded {len(BUCKET_CAPS)} bucket caps x {ITERATIONS} iterations on {WORLD} ranks "
        f"in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    rows = table(recorded)
    if "--markdown" in sys.argv:
        print(
            "| bucket_cap_mb | fused all-reduces / iteration | positions of the hook's op | "
            "potential deadlock (CL209) | models |"
        )
        print("|---|---|---|---|---|")
        for r in rows:
            yes = "Yes" if r["models"] else "No"
            print(
                f"| {r['cap']} | {r['fused']} | {r['positions']} | {yes} ({r['fused']}) | "
                f"{', '.join(r['models']) or '—'} |"
            )
        return
    print(f"{'cap MB':>6} {'fused':>5} {'positions':>9}  {'CL209':5}  models          check ms")
    for r in rows:
        yes = "yes" if r["models"] else "no"
        print(
            f"{r['cap']:6d} {r['fused']:5d} {r['positions']:9d}  {yes:5}  "
            f"{', '.join(r['models']) or '-':15s} {r['ms']:8.1f}"
        )


if __name__ == "__main__":
    main()
