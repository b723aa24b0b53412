# Reduced from https://github.com/HannesStark/FlowSite/pull/1
# Fix: the OOM outcome is shared (all-reduce of a flag) and every rank skips the batch if any
# rank had to skip it, so the ranks stay in step.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def training_step(batch: torch.Tensor, max_atoms: int) -> torch.Tensor | None:
    if batch.shape[0] > max_atoms:
        return None  # out of memory
    return batch.pow(2).mean(0)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    sizes = [10, 40, 12] if rank == 0 else [11, 9, 13]
    for n in sizes:
        grad = training_step(torch.randn(n, 3), max_atoms=32)
        skipped = torch.tensor([int(grad is None)])
        dist.all_reduce(skipped, op=dist.ReduceOp.MAX)
        if skipped.item():
            continue
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
