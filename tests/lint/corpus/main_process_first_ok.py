"""The "main process first" pattern: each rank passes exactly one barrier."""

from contextlib import contextmanager

import torch.distributed as dist


@contextmanager
def main_process_first(is_main):
    if not is_main:
        dist.barrier()
    yield
    if is_main:
        dist.barrier()


def prepare_dataset(build, cache_dir):
    with main_process_first(dist.get_rank() == 0):
        return build(cache_dir)
