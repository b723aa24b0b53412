"""Broken: each rank reads its own sample numbers back with `.numpy()` and lets them decide an
extra all_reduce. Rank 1's numbers are over 10, rank 0's are not: rank 1 all-reduces while
rank 0 waits in the barrier. The numbers are small and made from numbers: the dry-run knows
them on fake tensors (no real run)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(128, 128)
model(torch.randn(16, 128)).sum().backward()
index = torch.arange(4) * 2 + 8 * rank  # rank 0: 0 2 4 6, rank 1: 8 10 12 14
if index.numpy().max() > 10:  # rank-local: decides a collective
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
