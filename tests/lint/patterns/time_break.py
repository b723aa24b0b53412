import time
import torch
import torch.distributed as dist

def train(budget):
    start = time.time()
    while True:
        dist.all_reduce(torch.zeros(4))
        if time.time() - start > budget:
            break
