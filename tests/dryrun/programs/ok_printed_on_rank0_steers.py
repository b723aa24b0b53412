"""Clean: each step, every rank tests the all-reduced norm of the weight (each rank sums its
own partition), masked as DeepSpeed masks a non-finite norm
(`norm.masked_fill_(norm.isinf(), torch.tensor(-1.0))`), to decide whether to all-reduce the
weight, and rank 0 alone prints the norm (a number read only to be printed). The norm is the
same number on every rank, so every rank takes the same branch. Past the real re-run budget,
rank 0's print does not make the next step's test rank-local."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
for step in range(2):
    part = model.weight.chunk(2)[rank]  # each rank its own partition
    norm = part.float().norm().pow(2)
    dist.all_reduce(norm)  # the global norm: the same on every rank
    norm.masked_fill_(norm.isinf(), torch.tensor(-1.0))
    if norm.item() > 0.0:  # the same on every rank: every rank all-reduces
        dist.all_reduce(model.weight)
    if rank == 0:
        print(f"step {step} norm {norm.item():.3f}")  # printed, never tested
dist.barrier()
dist.destroy_process_group()
