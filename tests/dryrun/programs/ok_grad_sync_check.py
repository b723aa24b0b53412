"""Correct: DDP averages gradients; the program checks that every rank holds the same ones
(each rank trained on different data)."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
x = torch.full((2, 4), float(rank + 1))
model(x).sum().backward()
grad = model.module.weight.grad.detach().clone()
gathered = [torch.zeros_like(grad) for _ in range(world)]
dist.all_gather(gathered, grad)
assert all(torch.allclose(g, grad) for g in gathered), "gradients not in sync"
dist.destroy_process_group()
