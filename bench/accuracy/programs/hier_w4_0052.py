"""commlint accuracy benchmark program hier_w4_0052.

family: hier (hierarchical allgather), world size 4
mutation: duplicate (bug): h_allgather issued twice on rank 0

Run: torchrun --nproc-per-node 4 hier_w4_0052.py
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
        shard = torch.randn(2, generator=gen)
        node = torch.empty(4)
        if is_leader:
            peer_shard = torch.empty(2)
            dist.recv(peer_shard, src=partner, group=local_group)
            node = torch.cat([shard, peer_shard])
            nodes = [torch.empty_like(node) for _ in range(dist.get_world_size(leaders))]
            dist.all_gather(nodes, node, group=leaders)
            if rank == 0:
                nodes = [torch.empty_like(node) for _ in range(dist.get_world_size(leaders))]
                dist.all_gather(nodes, node, group=leaders)
            v = torch.cat(nodes)
        else:
            dist.send(shard, dst=partner, group=local_group)
            v = torch.empty(2 * world_size)
        dist.broadcast(v, src=rank - rank % 2, group=local_group)
        dist.barrier(group=world)
    return [("v", float(v.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
