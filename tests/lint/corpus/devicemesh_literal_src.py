"""2-D mesh: broadcasting over the TP dimension with a global-rank literal."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def setup():
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    seed = torch.randint(0, 2**31, (1,))
    dist.broadcast(seed, src=0, group=mesh.get_group("tp"))  # expect: CL106
    return mesh, seed
