"""Broken: rank 1 skips the monitored barrier; on gloo rank 0 raises, naming rank 1."""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.all_reduce(torch.ones(2))
if rank != 1:
    dist.monitored_barrier(timeout=timedelta(seconds=2))
dist.destroy_process_group()
