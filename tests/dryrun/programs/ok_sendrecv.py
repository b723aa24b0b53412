"""Correct: rank 0 sends then receives; rank 1 receives then sends."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
buf = torch.zeros(16)
if rank == 0:
    dist.send(torch.ones(16), dst=1)
    dist.recv(buf, src=1)
elif rank == 1:
    dist.recv(buf, src=0)
    dist.send(buf * 2, dst=0)
dist.barrier()
dist.destroy_process_group()
