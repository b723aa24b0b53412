# Reduced from https://github.com/HannesStark/FlowSite/pull/1
# Cause: an out-of-memory batch is skipped on the rank that hit it (catch, zero grads, move
# on); that rank skips the backward's gradient all-reduce and the ranks fall out of step.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def training_step(batch: torch.Tensor, max_atoms: int) -> torch.Tensor:
    if batch.shape[0] > max_atoms:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return batch.pow(2).mean(0)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    sizes = [10, 40, 12] if rank == 0 else [11, 9, 13]  # complexes of different sizes per rank
    for n in sizes:
        batch = torch.randn(n, 3)
        try:
            grad = training_step(batch, max_atoms=32)
        except RuntimeError as err:
            if "out of memory" not in str(err):
                raise
            print(rank, "skipping OOM batch")
            continue
        dist.all_reduce(grad)  # DDP's gradient all-reduce in backward
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
