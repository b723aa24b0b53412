"""Every rank reaches the barrier; only the main process writes."""

import json

import torch.distributed as dist


def is_main_process():
    return dist.get_rank() == 0


def write_results(results, path):
    dist.barrier()
    if not is_main_process():
        return
    with open(path, "w") as fh:
        json.dump(results, fh)
