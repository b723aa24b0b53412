"""Forward-only pipeline schedule; the loss is averaged over every stage."""

import torch
import torch.distributed as dist
from comm import is_last_stage, recv_forward, send_forward


def forward_only(stage, microbatches, shape):
    losses = []
    for mb in microbatches:
        x = recv_forward(torch.empty(shape)) if dist.get_rank() > 0 else mb
        y = stage(x)
        send_forward(y)
        if is_last_stage():
            losses.append(y.mean())
    total = torch.stack(losses).sum() if losses else torch.zeros(())
    dist.all_reduce(total)
    return total
