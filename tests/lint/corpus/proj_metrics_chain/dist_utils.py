"""Small helpers around torch.distributed."""

import torch
import torch.distributed as dist


def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0


def is_main_process():
    return get_rank() == 0


def reduce_mean(t):
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def summarize(metrics):
    return {k: reduce_mean(torch.tensor(v)).item() for k, v in metrics.items()}
