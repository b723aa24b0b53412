"""2-D mesh: group-relative roots and a TP-leader branch around a DP collective."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def setup():
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    seed = torch.randint(0, 2**31, (1,))
    dist.broadcast(seed, group_src=0, group=mesh.get_group("tp"))
    return mesh, seed


def log_dp_loss(mesh, loss):
    if mesh.get_local_rank("tp") == 0:
        dist.all_reduce(loss, group=mesh.get_group("dp"))
        print(loss.item())
