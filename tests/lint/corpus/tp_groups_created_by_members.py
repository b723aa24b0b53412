"""Tensor-parallel groups created only by their members."""

import torch.distributed as dist


def init_tensor_parallel(tp_size):
    rank = dist.get_rank()
    world = dist.get_world_size()
    my_group = None
    for start in range(0, world, tp_size):
        ranks = list(range(start, start + tp_size))
        if rank in ranks:
            my_group = dist.new_group(ranks)  # expect: CL108
    return my_group
