"""Checkpointing every N minutes of wall clock: each rank reads its own clock."""

import time

import torch
import torch.distributed as dist


def save_checkpoint(model, path):
    state = model.state_dict()
    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(state, path)


def train(model, loader, optimizer, path, every_s=600):
    last = time.time()
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        if time.time() - last > every_s:
            save_checkpoint(model, path)  # expect: CL102
            last = time.time()
