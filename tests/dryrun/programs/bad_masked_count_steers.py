"""Broken: each rank counts the tokens its mask keeps (a data-dependent size) and lets the
count decide an extra all_reduce. Rank 0 keeps fewer than 32 of its 64 tokens, rank 1 more:
rank 1 all-reduces while rank 0 waits in the barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
scores = torch.arange(64, dtype=torch.float32) / 64 - (0.3 if rank == 0 else -0.3)
model = torch.nn.Linear(64, 64)
kept = model(scores.reshape(1, 64)).detach().reshape(64)[scores > 0.5]  # data-dependent
if kept.numel() > 16:  # rank-local size decides a collective
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
