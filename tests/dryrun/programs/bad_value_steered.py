"""Broken: each rank skips the all-reduce when its own loss is small: a collective on a
data-dependent branch (the values differ per rank)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
loss = torch.tensor([0.2 + 0.6 * rank])
if loss.item() > 0.5:
    dist.all_reduce(loss)
dist.barrier()
dist.destroy_process_group()
