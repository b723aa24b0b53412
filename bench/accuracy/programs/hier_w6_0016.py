"""commlint accuracy benchmark program hier_w6_0016.

family: hier (hierarchical broadcast), world size 6
mutation: wrong_root (bug): h_bcast rooted at `2` instead of `0` on rank 0

Run: torchrun --nproc-per-node 6 hier_w6_0016.py
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
            if rank == 0:
                dist.broadcast(v, src=2, group=leaders)
            else:
                dist.broadcast(v, src=0, group=leaders)
            dist.send(v, dst=partner, group=local_group)
        else:
            dist.recv(v, src=partner, group=local_group)
        dist.barrier(group=world)
    return [("v", float(v.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
