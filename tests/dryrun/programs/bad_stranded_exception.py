"""Broken: rank 1 hits a bad batch and raises; rank 0 waits in the all-reduce."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.all_reduce(torch.ones(2))
if rank == 1:
    raise ValueError("corrupt sample in shard 1")
dist.all_reduce(torch.ones(2))
dist.destroy_process_group()
