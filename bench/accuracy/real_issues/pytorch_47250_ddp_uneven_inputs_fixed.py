# Reduced from https://github.com/pytorch/pytorch/issues/47250 (uneven inputs, see #38174)
# Fix: train under DDP's join() context manager, which shadows the collectives of the ranks
# that still have inputs after a rank has run out.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = [torch.randn(8, 16) for _ in range(4 + rank)]
    with model.join():
        for x in inputs:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
