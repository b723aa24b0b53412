"""Broken: on a 2x2 mesh, ranks 0 and 3 reduce on their tp group first, ranks 1 and 2 on
their dp group first: 0 waits for 1, 1 for 3, 3 for 2, 2 for 0."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
first, second = (tp, dp) if dist.get_rank() in (0, 3) else (dp, tp)
dist.all_reduce(torch.ones(4), group=first)
dist.all_reduce(torch.ones(4), group=second)
dist.destroy_process_group()
