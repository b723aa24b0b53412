"""commlint accuracy benchmark program hier_w4_0070.

family: hier (hierarchical broadcast), world size 4
mutation: main_helper (harmless): after h_bcast, rank 0 calls a helper that does not communicate

Run: torchrun --nproc-per-node 4 hier_w4_0070.py
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = float(os.environ.get("ACC_TIMEOUT", "10"))
STEPS = 3
TP = 2


def is_main_process() -> bool:
    return dist.get_rank() == 0


HISTORY: list[int] = []


def log_metrics(step: int) -> None:
    HISTORY.append(step)


def main(rank: int, world_size: int) -> list[tuple[str, float]]:
    timeout = timedelta(seconds=TIMEOUT)
    world = dist.new_group(list(range(world_size)), timeout=timeout)
    leaders = dist.new_group(list(range(0, world_size, 2)), timeout=timeout)
    local_group = None
    for start in range(0, world_size, 2):
        ranks = [start, start + 1]
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            local_group = group
    is_leader = rank % 2 == 0
    partner = rank + 1 if is_leader else rank - 1
    probe_gen = torch.Generator().manual_seed(500 + rank)
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        v = torch.randn(4, generator=gen) if rank == 0 else torch.empty(4)
        if is_leader:
            dist.broadcast(v, src=0, group=leaders)
            if is_main_process():
                log_metrics(step)
            dist.send(v, dst=partner, group=local_group)
        else:
            dist.recv(v, src=partner, group=local_group)
        dist.barrier(group=world)
    return [("v", float(v.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
