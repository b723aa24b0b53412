# Reduced from https://github.com/mosaicml/composer/pull/2117
# Fix: after each forward the ranks all-reduce an "I ran out of memory" flag before any
# gradient communication; if any rank OOMed, every rank halves its micro-batch and retries.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def any_rank_oomed(oomed: bool) -> bool:
    flag = torch.tensor([int(oomed)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def train_batch(batch: torch.Tensor, microbatch_size: int, capacity: int) -> int:
    while True:
        oomed = microbatch_size > capacity
        if any_rank_oomed(oomed):
            microbatch_size //= 2
            continue
        for mb in batch.split(microbatch_size):
            grad = mb.mean(0)
            dist.all_reduce(grad)
        return microbatch_size


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    capacity = 8 if rank == 0 else 4
    mbs = 8
    for _ in range(2):
        mbs = train_batch(torch.randn(16, 4), mbs, capacity)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
