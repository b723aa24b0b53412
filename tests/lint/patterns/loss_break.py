import torch
import torch.distributed as dist

def train(model, x, steps):
    for step in range(steps):
        dist.all_reduce(torch.zeros(4))
        loss = model(x).mean()
        if loss.item() < 0.1:
            break
