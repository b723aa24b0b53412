"""Broken: each rank turns its own loss into a Python number with float() and lets it decide
an all_reduce. Rank 0's data gives a loss of 0, rank 1's does not: rank 1 all-reduces while
rank 0 waits in the barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
layer = torch.nn.Linear(8, 8, bias=False)
loss = layer(torch.full((4, 8), float(rank))).square().mean()
print(f"loss {float(loss):.3f}")  # only printed: needs no value
if float(loss) > 0:  # rank-local: decides what this rank communicates
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
