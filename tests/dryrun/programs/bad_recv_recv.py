"""Broken: both ranks receive first."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
buf = torch.empty(8)
dist.recv(buf, src=1 - rank)
dist.send(torch.ones(8), dst=1 - rank)
dist.destroy_process_group()
