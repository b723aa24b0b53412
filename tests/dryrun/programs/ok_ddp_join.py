"""Correct: ranks with uneven numbers of batches train under DDP's `Join`. A rank still
training tells the joined ones whether to sync with an async all_reduce torch itself never
waits for (its own design): nothing for the program to fix."""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
with Join([model]):
    for _ in range(2 + rank):
        model(torch.randn(2, 4)).sum().backward()
dist.destroy_process_group()
