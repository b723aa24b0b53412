"""A lazily created, cached process group used from a rank-dependent branch's both arms."""

import torch.distributed as dist

_WORLD_CLONE = None


def world_clone():
    global _WORLD_CLONE
    if _WORLD_CLONE is None:
        _WORLD_CLONE = dist.new_group(list(range(dist.get_world_size())))
    return _WORLD_CLONE


def report(t):
    group = world_clone()
    if dist.get_rank() == 0:
        print("reducing")
    dist.all_reduce(t, group=group)
