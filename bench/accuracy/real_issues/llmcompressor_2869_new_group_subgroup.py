# Reduced from https://github.com/vllm-project/llm-compressor/pull/2869 (review thread)
# Cause: a context manager that creates a temporary gloo group with new_group is entered only
# by the ranks of the current subgroup; new_group is collective over the whole world, so those
# ranks wait for the ones that never call it.
import contextlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist


@contextlib.contextmanager
def suspend_distributed_timeout(current_group, timeout: timedelta):
    suspend_group = dist.new_group(backend="gloo", timeout=timeout)
    dist.barrier(group=suspend_group)
    try:
        yield
    finally:
        dist.barrier(group=current_group)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    calib_ranks = [0, 1]
    calib_group = dist.new_group(calib_ranks)
    if rank in calib_ranks:
        with suspend_distributed_timeout(calib_group, timeout):
            stats = torch.ones(4) * rank
            dist.all_reduce(stats, group=calib_group)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
