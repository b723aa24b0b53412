"""Gradient accumulation under DDP with a per-rank accumulation length: rank 0 syncs every
2 steps, the others every 4, so the ranks' gradient all-reduces pair different steps."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 4))
    accum = 2 if rank == 0 else 4
    for step in range(8):
        x = torch.randn(2, 4)
        if (step + 1) % accum != 0:
            with model.no_sync():
                model(x).sum().backward()
        else:
            model(x).sum().backward()  # expect: CL101
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
