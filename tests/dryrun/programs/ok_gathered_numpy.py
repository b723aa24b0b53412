"""Clean: every rank numbers its samples (a small arange, offset by rank), gathers them, reads
them back with `.numpy()` and checks none is missing (accelerate's data-loop check). Every
rank reads the same gathered values, so the extra all_reduce they decide is made by all. The
values are small and made from numbers: the dry-run knows them on fake tensors (no real run)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.Linear(128, 128)
model(torch.randn(16, 128)).sum().backward()
index = torch.arange(4) * 2 + 8 * rank  # rank 0: 0 2 4 6, rank 1: 8 10 12 14
parts = [torch.empty_like(index) for _ in range(world)]
dist.all_gather(parts, index)
seen = sorted(torch.cat(parts).numpy().tolist())
assert len(set(seen)) == 4 * world, seen
if seen[-1] > 10:  # the same on every rank
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
