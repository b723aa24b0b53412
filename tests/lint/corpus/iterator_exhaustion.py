"""A manual iterator loop: a rank with fewer batches leaves the loop early."""

import torch.distributed as dist


def train(model, loader, optimizer):
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            break  # expect: CL103
        loss = model(batch).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        optimizer.step()
