# Reduced from https://github.com/OpenBMB/BMTrain/issues/108
# Cause: a batch whose forward produced NaN is skipped with a rank-local check; only the rank
# that saw the NaN skips its backward, and with it the gradient reduction.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    w = torch.ones(8)
    for step in range(3):
        x = torch.randn(4, 8)
        if rank == 0 and step == 1:
            x[0, 0] = float("nan")  # a bad sample in rank 0's shard
        loss = (x @ w).pow(2).mean()
        if torch.isnan(loss):
            continue
        grad = torch.autograd.functional.jacobian(lambda v: (x @ v).pow(2).mean(), w)
        dist.all_reduce(grad)
        w -= 0.01 * grad
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
