"""Rank 0 pushes fresh weights to rank 1, which never receives them."""

import torch.distributed as dist


def refresh_weights(model, step):
    if step % 100:
        return
    if dist.get_rank() == 0:
        for p in model.parameters():
            dist.send(p.data, dst=1)  # expect: CL110
