# Reduced from https://github.com/mosaicml/composer/pull/2117
# Cause: with automatic micro-batching, only the rank that runs out of memory halves its
# micro-batch size and retries; it then runs more micro-batches (and gradient all-reduces)
# than the others for the same batch.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class OutOfMemoryError(RuntimeError):
    pass


def forward_backward(microbatch: torch.Tensor, capacity: int) -> torch.Tensor:
    if microbatch.shape[0] > capacity:
        raise OutOfMemoryError("CUDA out of memory")
    grad = microbatch.mean(0)
    dist.all_reduce(grad)
    return grad


def train_batch(batch: torch.Tensor, microbatch_size: int, capacity: int) -> int:
    while True:
        try:
            for mb in batch.split(microbatch_size):
                forward_backward(mb, capacity)
            return microbatch_size
        except OutOfMemoryError:
            microbatch_size //= 2


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    capacity = 8 if rank == 0 else 4  # rank 1 has 30 GB allocated elsewhere
    mbs = 8
    for _ in range(2):
        mbs = train_batch(torch.randn(16, 4), mbs, capacity)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
