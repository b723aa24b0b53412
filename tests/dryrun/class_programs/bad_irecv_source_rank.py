"""Odd ranks receive from the even rank before them; the one whose message came from rank 4
(`work._source_rank()`, as torch's recv(src=None) reads it) alone enters a barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.empty(4096)
if rank % 2 == 0:
    dist.send(x, dst=rank + 1)
else:
    w = dist.irecv(x, src=rank - 1)
    w.wait()
    if w._source_rank() == 4:
        dist.barrier()
dist.destroy_process_group()
