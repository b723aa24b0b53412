"""Broken: each rank tests its own loss (read with .item()) and only the ranks above the
threshold all-reduce: rank 1's loss is larger, so it waits in an all_reduce rank 0 never calls.
Its docs twin is CL211's failing example; with the value not computed (`--real-budget 0`) the
dry-run reports CL211 at the test."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = torch.nn.Linear(16, 1)
x = torch.randn(8, 16)
loss = model(x).pow(2).mean() + 2.0 * rank
if loss.item() > 1.0:  # each rank's own batch decides
    dist.all_reduce(torch.ones(1))
dist.barrier()
dist.destroy_process_group()
