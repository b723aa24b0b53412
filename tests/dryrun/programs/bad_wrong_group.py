"""Broken: two groups over the same ranks, reduced in a different order on each rank."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grads = dist.new_group([0, 1])
stats = dist.new_group([0, 1])
if rank == 0:
    dist.all_reduce(torch.ones(4), group=grads)
    dist.all_reduce(torch.ones(4), group=stats)
else:
    dist.all_reduce(torch.ones(4), group=stats)
    dist.all_reduce(torch.ones(4), group=grads)
dist.destroy_process_group()
