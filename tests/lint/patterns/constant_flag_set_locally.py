import torch
import torch.distributed as dist


def maybe_stop(loss):
    stop = torch.tensor([0])
    if loss.item() > 3.0:
        stop.fill_(1)  # this rank's loss decides: the flag is no longer the same everywhere
    if stop.item():
        dist.barrier()
