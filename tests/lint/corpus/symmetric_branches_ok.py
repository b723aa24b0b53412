"""Both arms of a rank branch issue the same collectives."""

import torch
import torch.distributed as dist


def share_vocab(path, size):
    if dist.get_rank() == 0:
        vocab = torch.load(path)
        dist.broadcast(vocab, src=0)
    else:
        vocab = torch.empty(size, dtype=torch.long)
        dist.broadcast(vocab, src=0)
    return vocab


def share_scale(scale):
    t = torch.tensor([scale if dist.get_rank() == 0 else 0.0])
    dist.broadcast(t, src=0)
    return t.item()
