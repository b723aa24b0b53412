"""A deliberate rank-0-only collective on a group that holds rank 0 alone."""

import torch.distributed as dist


def log_to_solo_group(t, solo):
    if dist.get_rank() == 0:
        dist.all_reduce(t, group=solo)  # noqa: CL101 - `solo` is new_group([0])
