"""Each rank creates its own group first: the groups are created in a rank-dependent order."""

import torch.distributed as dist


def build_groups(rank, evens, odds):
    if rank % 2 == 0:
        mine = dist.new_group(evens)  # expect: CL108
        other = dist.new_group(odds)
    else:
        mine = dist.new_group(odds)
        other = dist.new_group(evens)
    return mine, other
