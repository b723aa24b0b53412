"""Broken: only rank 0 all-reduces the metric; the others go straight to the barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    dist.all_reduce(torch.ones(1))
dist.barrier()
dist.destroy_process_group()
