import torch.distributed as dist


def sync(rank, world_size, x):
    if rank == 0:
        if world_size > 1:  # true wherever ranks can disagree: still rank 0 alone
            dist.all_reduce(x)
