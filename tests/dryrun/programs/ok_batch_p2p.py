"""Correct: ring exchange with batch_isend_irecv; every op of the batch is waited."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
send = torch.full((4,), float(rank))
recv = torch.empty(4)
ops = [
    dist.P2POp(dist.isend, send, (rank + 1) % world),
    dist.P2POp(dist.irecv, recv, (rank - 1) % world),
]
for req in dist.batch_isend_irecv(ops):
    req.wait()
dist.barrier()
dist.destroy_process_group()
