"""commlint accuracy benchmark program hier_w4_0208.

family: hier (hierarchical reducescatter), world size 4
mutation: wrong_group (bug): h_send on local_twin (same members as local_group); its peer stays on local_group

Run: torchrun --nproc-per-node 4 hier_w4_0208.py
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
    local_twin = None
    for start in range(0, world_size, 2):
        ranks = [start, start + 1]
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            local_twin = group
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        v = torch.randn(2 * world_size, generator=gen)
        if is_leader:
            buf = torch.empty(2 * world_size)
            dist.recv(buf, src=partner, group=local_group)
            v = v + buf
            mine = v.new_empty(v.numel() // dist.get_world_size(leaders))
            dist.reduce_scatter_tensor(mine, v, group=leaders)
            keep, give = mine[:2].clone(), mine[2:].clone()
            dist.send(give, dst=partner, group=local_twin)
            v = keep
        else:
            dist.send(v, dst=partner, group=local_group)
            v = torch.empty(2)
            dist.recv(v, src=partner, group=local_group)
        total = v.sum().reshape(1)
        dist.all_reduce(total, group=world)
        dist.barrier(group=world)
    return [("total", float(total.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
