"""Raw Flight Recorder dumps of a real gloo hang: `python flight_raw_gloo.py OUTDIR [PORT]`.

Two ranks, two process groups over the same ranks, all-reduced in opposite orders: rank 0
waits in group A for rank 1, which waits in group B for rank 0. Each rank, when its collective
times out, writes what torch gives it — `_dump_fr_trace()` (pickle) to `OUTDIR/pickle/rank_<r>`
and `_dump_fr_trace_json()` to `OUTDIR/json/rank_<r>.json` — unchanged (gloo leaves
`pg_config` empty and every entry `scheduled`), then leaves with `os._exit`.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = timedelta(seconds=2)


def opposite_orders(rank: int, x: torch.Tensor, a, b) -> None:
    if rank == 0:
        dist.all_reduce(x, group=a)
        dist.all_reduce(x, group=b)
    else:
        dist.all_reduce(x, group=b)
        dist.all_reduce(x, group=a)


def _worker(rank: int, out: str, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=TIMEOUT
    )
    x = torch.ones(8)
    dist.all_reduce(x)  # completes on both ranks
    a = dist.new_group([0, 1], timeout=TIMEOUT)
    b = dist.new_group([0, 1], timeout=TIMEOUT)
    try:  # noqa: SIM105 (a timeout is expected: dump, as a dump-on-timeout handler would)
        opposite_orders(rank, x, a, b)
    except RuntimeError:
        pass
    with open(os.path.join(out, "pickle", f"rank_{rank}"), "wb") as fh:
        fh.write(torch._C._distributed_c10d._dump_fr_trace())
    raw = torch._C._distributed_c10d._dump_fr_trace_json()
    with open(os.path.join(out, "json", f"rank_{rank}.json"), "wb") as fh:
        fh.write(raw if isinstance(raw, bytes) else raw.encode())
    sys.stdout.flush()
    os._exit(0)


def generate(out: str, port: int = 29631) -> None:
    for sub in ("pickle", "json"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    mp.start_processes(_worker, args=(out, port), nprocs=2, start_method="fork")


if __name__ == "__main__":
    generate(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 29631)
