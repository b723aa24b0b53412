"""Background checkpointing that gathers optimizer state from a thread."""

import threading

import torch
import torch.distributed as dist


def _gather_and_save(state, path):
    shards = [None] * dist.get_world_size()
    dist.all_gather_object(shards, state)
    if dist.get_rank() == 0:
        torch.save(shards, path)


def save_in_background(optimizer, path):
    t = threading.Thread(target=_gather_and_save, args=(optimizer.state_dict(), path))  # expect: CL112
    t.start()
    return t
