"""Correct: the loss is all-reduced before it is tested, so every rank takes the same branch
(CL211's fix). With the value not computed (`--real-budget 0`) the dry-run knows it is the
same on every rank and takes the test alike everywhere."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = torch.nn.Linear(16, 1)
x = torch.randn(8, 16)
loss = (model(x).pow(2).mean() + 2.0 * rank).detach()
dist.all_reduce(loss)  # every rank now holds the sum
if loss.item() > 1.0:  # the same on every rank
    dist.all_reduce(torch.ones(1))
dist.barrier()
dist.destroy_process_group()
