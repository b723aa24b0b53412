"""Hangs: a loader with worker processes and pinned memory (the usual GPU settings), and a
barrier only rank 0 reaches each step. The workers end when the loader is done; their exit
is not the rank's."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
loader = DataLoader(
    TensorDataset(torch.randn(64, 4)), batch_size=16, pin_memory=True, num_workers=2
)
total = torch.ones(1)
for (_x,) in loader:
    dist.all_reduce(total)
    if rank == 0:
        dist.barrier()  # rank 0 only
dist.destroy_process_group()
