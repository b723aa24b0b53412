"""Broken: an EMA copy of the DDP model (copy.deepcopy), then a barrier on rank 0 only.

The deep copy must not disturb the dry-run's plumbing; the rank-0-only barrier hangs."""

import copy
import gc

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(nn.Linear(8, 8))
model(torch.randn(4, 8)).sum().backward()
ema = copy.deepcopy(model)
scale = copy.deepcopy(nn.Parameter(torch.tensor(2.0)))  # a fake tensor that knows its value
tensor_copy = copy.deepcopy(torch.randn(3))
del ema, scale, tensor_copy
gc.collect()
if dist.get_rank() == 0:
    dist.barrier()
