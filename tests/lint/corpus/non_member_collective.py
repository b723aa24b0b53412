"""A parameter-server layout where rank 0 reduces on the workers' group."""

import torch
import torch.distributed as dist


def run(rank):
    workers = dist.new_group([1, 2, 3])
    grads = torch.zeros(10)
    if rank == 0:
        dist.all_reduce(grads, group=workers)  # expect: CL107
    else:
        grads += rank
        dist.all_reduce(grads, group=workers)
