"""A training loop on torchtitan's utilities: every rank averages the loss over the
data-parallel mesh (an all-reduce) and clips; rank zero logs what all computed. The file
makes a group: `clip_grad_norm_` reduces over the parameters' mesh, not WORLD (no CL105)."""

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torchtitan.distributed import utils as dist_utils


def dp_mesh_of(world_size: int) -> DeviceMesh:
    return DeviceMesh.from_group(dist.new_group(list(range(world_size))), "cuda")


def train(model, opt, batches, dp_mesh):
    for batch in batches:
        loss = model(batch).pow(2).mean()
        loss.backward()
        dist_utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad()
        mean = dist_utils.dist_mean(loss.detach(), dp_mesh)
        if dist.get_rank() == 0:
            print(f"loss {mean:.3f}")
