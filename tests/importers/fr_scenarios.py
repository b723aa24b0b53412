"""Real Flight Recorder dumps with gloo on CPU: `python fr_scenarios.py SCENARIO|all OUT [PORT]`.

Each scenario is a small program that hangs the way real jobs do. Every rank that times out
(or, for a rank stuck on the CPU, that wakes up) writes its Flight Recorder buffer to
`OUTDIR/rank_<r>` (pickle, what PyTorch's dump-on-timeout writes) and `OUTDIR/rank_<r>.json`.

Gloo leaves `pg_config` empty; fr_trace needs it, so the dumps are completed here from what
the program itself knows about its groups (name, description, ranks) — the same facts an NCCL
dump carries. Nothing else in the dump is changed.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time
from datetime import timedelta

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = timedelta(seconds=2)
WORLD = {"cross_group": 2, "skipped_collective": 3, "stuck_rank": 3, "clean": 2}


def _groups() -> dict:
    out = {}
    for pg, name in dist.distributed_c10d._world.pg_names.items():
        ranks = dist.get_process_group_ranks(pg)
        desc = getattr(pg, "group_desc", "") or ("default_pg" if pg is dist.group.WORLD else "")
        out[name] = {"name": name, "desc": desc, "ranks": json.dumps(sorted(ranks))}
    return out


def _dump(out: str, rank: int) -> None:
    data = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    data["pg_config"] = _groups()
    with open(os.path.join(out, f"rank_{rank}"), "wb") as fh:
        pickle.dump(data, fh)
    raw = json.loads(torch._C._distributed_c10d._dump_fr_trace_json())
    raw["pg_config"] = data["pg_config"]
    with open(os.path.join(out, f"rank_{rank}.json"), "w") as fh:
        json.dump(raw, fh)


def reduce_metrics(x, group=None):
    dist.all_reduce(x, group=group)


def train_step(rank, x, tp, dp):
    """cross_group: rank 0 syncs tp then dp; rank 1 dp then tp."""
    if rank == 0:
        dist.all_reduce(x, group=tp)
        dist.all_reduce(x, group=dp)
    else:
        dist.all_reduce(x, group=dp)
        dist.all_reduce(x, group=tp)


def log_metrics(rank, x):
    """skipped_collective: rank 2 has no metrics this step and skips the aggregation."""
    if rank != 2:
        reduce_metrics(x)
    dist.barrier()


def load_batch(rank):
    """stuck_rank: rank 2's data loader stalls for longer than the timeout."""
    if rank == 2:
        time.sleep(TIMEOUT.total_seconds() + 1)


def _worker(rank: int, scenario: str, out: str, port: int) -> None:
    world = WORLD[scenario]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=TIMEOUT,
    )
    x = torch.ones(8, dtype=torch.float32)
    try:
        dist.all_reduce(x)  # a completed warm-up collective on every rank
        if scenario == "cross_group":
            tp = dist.new_group([0, 1], timeout=TIMEOUT, group_desc="tp")
            dp = dist.new_group([0, 1], timeout=TIMEOUT, group_desc="dp")
            train_step(rank, x, tp, dp)
        elif scenario == "skipped_collective":
            log_metrics(rank, x)
        elif scenario == "stuck_rank":
            load_batch(rank)
            if rank == 2:
                _dump(out, rank)  # the monitor thread of the stuck rank dumps on the signal
                os._exit(0)
            reduce_metrics(x)
        elif scenario == "clean":
            reduce_metrics(x)
            dist.broadcast(x, src=1)
    except RuntimeError:
        pass  # a timeout: dump, as TORCH_NCCL_DUMP_ON_TIMEOUT does
    _dump(out, rank)
    sys.stdout.flush()
    os._exit(0)


def generate(scenario: str, out: str, port: int = 29611) -> None:
    os.makedirs(out, exist_ok=True)
    mp.start_processes(
        _worker, args=(scenario, out, port), nprocs=WORLD[scenario], start_method="fork"
    )


def generate_all(root: str, port: int = 29611) -> None:
    """Every scenario, one after another, from one parent that imported torch once."""
    for k, scenario in enumerate(WORLD):
        generate(scenario, os.path.join(root, scenario), port + k)


if __name__ == "__main__":
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 29611
    if sys.argv[1] == "all":
        generate_all(sys.argv[2], port)
    else:
        generate(sys.argv[1], sys.argv[2], port)
