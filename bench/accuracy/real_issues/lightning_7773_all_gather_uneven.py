# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/7773
# (gloo: https://github.com/pytorch/pytorch/issues/156627)
# Cause: all_gather of per-rank predictions whose first dimension differs across ranks (the
# last evaluation batches are uneven); NCCL freezes, gloo rejects the unequal sizes.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    preds = torch.randn(3 + 2 * rank, 10)  # rank 0: 3 rows, rank 1: 5 rows
    gathered = [torch.zeros_like(preds) for _ in range(world)]
    dist.all_gather(gathered, preds)
    print(rank, [g.shape[0] for g in gathered])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
