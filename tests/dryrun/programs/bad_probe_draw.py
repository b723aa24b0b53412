"""Broken: each rank draws a data probe from its own generator (seeded by rank) and lets it
decide an extra all_reduce. Rank 0's draw is under 0.5, rank 1's is over: rank 1 all-reduces
while rank 0 waits in the barrier. The draw is tiny, so the dry-run draws it for real (no real
compute of the model)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
probes = torch.Generator().manual_seed(29 + rank)  # rank 0: 0.12, rank 1: 0.90
model = torch.nn.Linear(256, 256)
out = model(torch.randn(32, 256)).sum()
out.backward()
if float(torch.rand(1, generator=probes)) > 0.5:  # rank-local: decides a collective
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
