"""Manual sharding: ranks get shards of different lengths, each item is all-reduced."""

import torch
import torch.distributed as dist


def score(items, model):
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = items[rank::world]
    total = torch.zeros(1)
    for item in shard:
        s = model(item).sum()
        dist.all_reduce(s)  # expect: CL101
        total += s
    return total
