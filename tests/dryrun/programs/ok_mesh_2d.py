"""Correct: a 2x2 DeviceMesh; every rank reduces on its dp group and on its tp group."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
dist.all_reduce(torch.ones(4), group=mesh.get_group("tp"))
dist.all_reduce(torch.ones(4), group=mesh.get_group("dp"))
dist.barrier()
dist.destroy_process_group()
