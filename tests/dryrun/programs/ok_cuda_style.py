"""Correct: a GPU-style script (set_device, .cuda(), device="cuda", streams, synchronize)
that falls back to CPU when no GPU exists. The dry-run pretends a GPU is there."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
use_gpu = torch.cuda.is_available()
dist.init_process_group("nccl" if use_gpu else "gloo")
if use_gpu:
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
else:
    device = torch.device("cpu")
model = nn.Linear(16, 16)
model = model.cuda() if use_gpu else model
ddp = DDP(model, device_ids=[local_rank] if use_gpu else None)
x = torch.randn(8, 16, device=device)
if use_gpu:
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 2
    torch.cuda.current_stream().wait_stream(side)
    done = torch.cuda.Event()
    done.record()
ddp(x).sum().backward()
if use_gpu:
    torch.cuda.synchronize()
dist.barrier()
dist.destroy_process_group()
