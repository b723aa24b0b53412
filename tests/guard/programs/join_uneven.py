"""A correct DDP job on uneven inputs: rank r has 2 + 2r batches, and `Join` makes the ranks
that run out shadow the others' gradient all-reduces until every rank is done."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
batches = [torch.randn(8, 6, generator=g) for _ in range(2 + 2 * rank)]
for _epoch in range(2):
    with Join([model]):
        for x in batches:
            loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with model.join():  # DDP's own spelling of the same
        for x in batches[: 1 + rank]:
            model(x).sum().backward()
total = torch.tensor([float(len(batches))])
dist.all_reduce(total)
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
# one write of the whole line: the ranks share one pipe
sys.stdout.write(f"rank {rank} batches {total.item():.0f} weights {weights.sum().item():.4f}\n")
sys.stdout.flush()
dist.destroy_process_group()
