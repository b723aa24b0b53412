"""DDP training loop: the checkpoint barrier sits inside `if rank == 0`."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, optimizer, epochs, ckpt_dir):
    rank = dist.get_rank()
    ddp = DDP(model)
    for epoch in range(epochs):
        for batch, target in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(batch), target)
            loss.backward()
            optimizer.step()
        if rank == 0:
            torch.save(ddp.module.state_dict(), os.path.join(ckpt_dir, f"{epoch}.pt"))
            dist.barrier()  # expect: CL101
