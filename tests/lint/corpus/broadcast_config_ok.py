"""Rank 0 reads the run config and broadcasts it; everybody uses it."""

import json
import os

import torch.distributed as dist


def load_config(path):
    rank = int(os.environ["RANK"])
    holder = [None]
    if rank == 0:
        with open(path) as fh:
            holder[0] = json.load(fh)
    dist.broadcast_object_list(holder, src=0)
    config = holder[0]
    if config["eval_only"]:
        dist.barrier()
    return config
