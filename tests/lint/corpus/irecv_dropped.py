"""Prefetching the next micro-batch with an irecv whose handle is dropped."""

import torch
import torch.distributed as dist


def prefetch(shape, src):
    buf = torch.empty(shape)
    dist.irecv(buf, src=src)  # expect: CL111
    return buf


def reduce_async(grads):
    handle = dist.all_reduce(grads, async_op=True)  # expect: CL111
    return grads
