"""Initialising only when launched by torchrun: LOCAL_RANK is set on every rank or none."""

import os

import torch.distributed as dist


def maybe_init():
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    if local_rank != -1:
        dist.init_process_group("nccl")
        dist.barrier()
    return local_rank
