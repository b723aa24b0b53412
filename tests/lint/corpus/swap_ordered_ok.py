"""Two ranks swap activations; rank 1 receives first."""

import torch
import torch.distributed as dist


def swap(x):
    rank = dist.get_rank()
    other = torch.empty_like(x)
    if rank == 0:
        dist.send(x, dst=1)
        dist.recv(other, src=1)
    else:
        dist.recv(other, src=0)
        dist.send(x, dst=0)
    return other
