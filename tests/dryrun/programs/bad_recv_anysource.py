"""Broken: rank 0 receives from any source twice, but rank 1 sends only once."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
buf = torch.zeros(4)
if rank == 0:
    for _ in range(2):
        dist.recv(buf, src=None)
else:
    dist.send(torch.ones(4), dst=0)
dist.destroy_process_group()
