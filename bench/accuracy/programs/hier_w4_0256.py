"""commlint accuracy benchmark program hier_w4_0256.

family: hier (hierarchical alltoall), world size 4
mutation: splits (bug): h_alltoall sends one extra element to its first peer on rank 2

Run: torchrun --nproc-per-node 4 hier_w4_0256.py
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
        v = torch.randn(2 * world_size, generator=gen)
        if rank == 2:
            n = dist.get_world_size(world)
            v = torch.cat([v, v.new_zeros(1)])
            mixed = torch.empty(v.numel() - 1)
            dist.all_to_all_single(
                mixed,
                v,
                output_split_sizes=None,
                input_split_sizes=[(v.numel() - 1) // n + (j == 0) for j in range(n)],
                group=world,
            )
        else:
            mixed = torch.empty_like(v)
            dist.all_to_all_single(mixed, v, group=world)
        if is_leader:
            other = torch.empty_like(mixed)
            dist.send(mixed, dst=partner, group=local_group)
            dist.recv(other, src=partner, group=local_group)
        else:
            other = torch.empty_like(mixed)
            dist.recv(other, src=partner, group=local_group)
            dist.send(mixed, dst=partner, group=local_group)
        total = (mixed.sum() + other.sum()).reshape(1)
        dist.all_reduce(total, group=world)
        dist.barrier(group=world)
    return [("total", float(total.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
