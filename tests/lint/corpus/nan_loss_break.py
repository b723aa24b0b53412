"""A rank that sees a NaN loss leaves the loop; the others wait in the all-reduce."""

import torch
import torch.distributed as dist


def train_epoch(model, loader, optimizer):
    for batch, target in loader:
        loss = torch.nn.functional.mse_loss(model(batch), target)
        if torch.isnan(loss):
            print("nan loss, stopping")
            break  # expect: CL103
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        optimizer.step()
