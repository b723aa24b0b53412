import torch
import torch.distributed as dist

def train(steps):
    for step in range(steps):
        dist.all_reduce(torch.zeros(4))
        if dist.get_rank() == 0:
            break
