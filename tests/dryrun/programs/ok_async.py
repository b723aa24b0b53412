"""Correct: async all_reduce overlapped with isend/irecv; every handle is waited."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
grad = torch.ones(8)
work = dist.all_reduce(grad, async_op=True)
if rank == 0:
    req = dist.isend(torch.arange(4.0), dst=1)
else:
    buf = torch.empty(4)
    req = dist.irecv(buf, src=0)
req.wait()
work.wait()
dist.destroy_process_group()
