"""A training step with a rank-conditional collective (CL101): rank 0 averages the loss for
its log line, the other ranks never call the all_reduce, and rank 0 waits forever."""

import torch.distributed as dist


def train_step(model, batch, optimizer):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    if dist.get_rank() == 0:
        dist.all_reduce(loss)
        print("loss", loss.item() / dist.get_world_size())
    return loss
