"""A "main process first" variant whose two halves do not match."""

import torch.distributed as dist


def build_cache(is_main, build, stats):
    if not is_main:
        dist.barrier()  # expect: CL101
    build()
    if is_main:
        dist.all_reduce(stats)  # expect: CL101
