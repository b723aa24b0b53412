"""Helpers that turn sharded tensors into numbers for the logs."""
from torch.distributed.tensor import Replicate


def replicated_mean(dt):
    """Mean of a DTensor, computed on its replicated form."""
    mesh = dt.device_mesh
    full = dt.redistribute(mesh, [Replicate()] * mesh.ndim)
    return full.to_local().mean().item()
