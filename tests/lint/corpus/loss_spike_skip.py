"""Skipping a step on a loss spike skips the gradient all-reduce on that rank only."""

import torch.distributed as dist


def train(model, loader, optimizer, criterion, max_loss=50.0):
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        if loss.item() > max_loss:
            optimizer.zero_grad()
            continue  # expect: CL103
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        optimizer.step()
