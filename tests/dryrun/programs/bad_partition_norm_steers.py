"""Hangs: as ok_printed_on_rank0_steers.py, but the norm each rank tests is its own
partition's, never all-reduced. Rank 0's partition is above the threshold and rank 1's is
not: rank 0 all-reduces the weight while rank 1 waits in the barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
for step in range(2):
    part = model.weight.chunk(2)[rank]  # each rank its own partition
    norm = part.float().norm().pow(2)  # not all-reduced: the rank's own
    norm.masked_fill_(norm.isinf(), torch.tensor(-1.0))
    if norm.item() > 10.5:  # 10.8 on rank 0, 10.3 on rank 1
        dist.all_reduce(model.weight)
    if rank == 0:
        print(f"step {step} norm {norm.item():.3f}")  # printed, never tested
dist.barrier()
dist.destroy_process_group()
