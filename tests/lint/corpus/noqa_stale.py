"""A suppression left behind after the code was fixed."""

import torch.distributed as dist


def average(t):
    dist.all_reduce(t)  # noqa: CL101  # expect: CL113
    t /= dist.get_world_size()
    return t
