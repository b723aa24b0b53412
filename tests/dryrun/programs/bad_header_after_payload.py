"""Broken: a two-stage pipeline where rank 0 sends the activation before the shape header
its peer expects first. Rank 1 receives 32 floats into a 2-float header: gloo aborts the
receive. The dry-run never needs the header's value: the mismatch is found before rank 1
would read it."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    act = torch.tanh(torch.nn.Linear(8, 8)(torch.randn(4, 8)))
    header = torch.tensor([float(act.shape[0]), float(act.shape[1])])
    dist.send(act, dst=1)  # the payload first: the peer posted the header
    dist.send(header, dst=1)
else:
    header = torch.empty(2)
    dist.recv(header, src=0)
    act = torch.empty(int(header[0]), int(header[1]))  # the header's value decides a shape
    dist.recv(act, src=0)
dist.barrier()
dist.destroy_process_group()
