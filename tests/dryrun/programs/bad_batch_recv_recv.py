"""Broken: a batch_isend_irecv where both ranks only post receives from each other."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
buf = torch.empty(4)
for req in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, 1 - rank)]):
    req.wait()
dist.destroy_process_group()
