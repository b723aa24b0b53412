"""Broken: rank 0 runs one extra FSDP2 forward/backward (an evaluation pass with grad)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
fully_shard(model, mesh=mesh)
model(torch.randn(2, 16)).sum().backward()
if dist.get_rank() == 0:
    model(torch.randn(2, 16)).sum().backward()
dist.barrier()
dist.destroy_process_group()
