# Reduced from https://github.com/NVIDIA-NeMo/Automodel/pull/2468
# Fix: every micro-batch min-reduces a per-rank "has valid anchors" flag; if any rank has
# none, all ranks skip that micro-batch together and no rank runs backward alone.
import os
from datetime import timedelta

import torch
import torch.distributed as dist

BLOCK = 4


def valid_lengths(batch: list[int]) -> list[int]:
    return [n for n in batch if n >= BLOCK]


def all_ranks_have_valid(has_valid: bool) -> bool:
    flag = torch.tensor(int(has_valid))
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    batches = [[8, 6], [9, 7], [5, 8]] if rank == 0 else [[7, 9], [2, 3], [6, 6]]
    grad = torch.zeros(32)
    for batch in batches:
        lengths = valid_lengths(batch)
        if not all_ranks_have_valid(bool(lengths)):
            continue
        grad.fill_(float(sum(lengths)))
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
