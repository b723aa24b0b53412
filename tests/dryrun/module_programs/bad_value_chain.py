"""A chain of values: rank 0 sends 1 to rank 1, every rank adds one and sends it on. Every rank
but the ends takes the same path up to what it receives, which is its position in the chain,
not an expression its rank carries: rank 5 alone (it receives 5) issues one more all-reduce."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.zeros(1)
if rank == 0:
    x += 1
else:
    dist.recv(x, src=rank - 1)
    x += 1
if rank < world - 1:
    dist.send(x, dst=rank + 1)
if int(x.item()) == 6:
    dist.all_reduce(torch.zeros(4))  # expect: CL203
dist.barrier()
dist.destroy_process_group()
