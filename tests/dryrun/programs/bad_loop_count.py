"""Broken: the number of steps depends on the rank's shard size; no agreement."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for _ in range(3 - rank):
    dist.all_reduce(torch.ones(4))
dist.barrier()
dist.destroy_process_group()
