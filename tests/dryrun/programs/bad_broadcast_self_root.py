"""Broken: every rank names itself as the broadcast root."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.broadcast(torch.ones(4), src=rank)
dist.destroy_process_group()
