"""Overlapping gradient all-reduces with their handles waited."""

import torch.distributed as dist


def overlapped_reduce(params):
    handles = []
    for p in params:
        handles.append(dist.all_reduce(p.grad, async_op=True))
    for h in handles:
        h.wait()


def exchange(send_buf, recv_buf, peer):
    ops = [dist.P2POp(dist.isend, send_buf, peer), dist.P2POp(dist.irecv, recv_buf, peer)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
