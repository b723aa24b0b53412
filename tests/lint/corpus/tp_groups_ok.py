"""Tensor-parallel groups: every rank creates every group, keeps its own."""

import torch.distributed as dist


def init_tensor_parallel(tp_size):
    rank = dist.get_rank()
    world = dist.get_world_size()
    my_group = None
    for start in range(0, world, tp_size):
        ranks = list(range(start, start + tp_size))
        group = dist.new_group(ranks)
        if rank in ranks:
            my_group = group
    return my_group


def tp_all_reduce(x, group):
    dist.all_reduce(x, group=group)
    return x
