"""The same accumulation with one length on every rank: every rank syncs at the same steps."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 4))
    accum = 4
    for step in range(8):
        x = torch.randn(2, 4)
        if (step + 1) % accum != 0:
            with model.no_sync():
                model(x).sum().backward()
        else:
            model(x).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
