"""Broken: on rank 1 the forward skips a layer, so DDP (find_unused_parameters=False) never
reduces its gradient there; ranks disagree on the buckets."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self, skip):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.skip = skip

    def forward(self, x):
        x = self.a(x)
        return x if self.skip else self.b(x)


dist.init_process_group("gloo")
model = DDP(Net(skip=dist.get_rank() == 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
dist.destroy_process_group()
