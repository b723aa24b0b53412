"""FSDP2 (`fully_shard`) training where rank 1 skips the forward and backward of its last
batch (a data-dependent skip, `skip`) and goes on to the loss all_reduce, while rank 0 runs the
step: rank 0's all-gather of the first layer meets rank 1's all_reduce. `same`: every rank runs
every step."""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = torch.zeros(1)
for step in range(4):
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
    empty = sys.argv[1] == "skip" and rank == 1 and step == 3
    if not empty:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        total += loss.detach()
    dist.all_reduce(total)
sys.stdout.write(f"rank {rank} result {total.tolist()}\n")
dist.destroy_process_group()
