"""Two chains of values that run backwards, each from its last rank down to its first: the even
ranks' starts at 1, the odd ranks' at 10, and every rank adds one and passes it on to the rank
two below. Rank 1 waits for rank 3 before rank 3 is covered: what it reads is first assumed
from the even chain's message at the same place (rank 2 to rank 0: 3), while rank 3 really
sends 12 — rank 1 alone (it receives 12) issues one more all-reduce."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
start = 10 if rank % 2 else 1  # the parity is a test on the rank: one class per parity
x = torch.zeros(1)
if rank + 2 < world:
    dist.recv(x, src=rank + 2)
    x += 1
else:
    x += start
if rank >= 2:
    dist.send(x, dst=rank - 2)
if int(x.item()) == 13:
    dist.all_reduce(torch.zeros(4))  # expect: CL203
dist.barrier()
dist.destroy_process_group()
