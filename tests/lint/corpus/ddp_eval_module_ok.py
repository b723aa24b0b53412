"""DDP: rank 0 evaluates the unwrapped module, which does not communicate."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def sample(model, prompt, rank):
    ddp = DDP(model)
    ddp.eval()
    if rank == 0:
        with torch.no_grad():
            out = ddp.module(prompt)
        print(out.argmax(-1))
    dist.barrier()
