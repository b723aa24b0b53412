"""Correct: every rank seeds its probe generator alike, so every rank draws the same number
and takes the same branch: the extra all_reduce is issued by all or none."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
probes = torch.Generator().manual_seed(1234)  # the same seed everywhere
model = torch.nn.Linear(256, 256)
for _ in range(3):
    out = model(torch.randn(32, 256)).sum()
    out.backward()
    if float(torch.rand(1, generator=probes)) > 0.5:  # the same on every rank
        dist.all_reduce(torch.ones(2))
    dist.barrier()
dist.destroy_process_group()
