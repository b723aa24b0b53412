"""Hangs: each rank takes the square root of its own sum (`math.sqrt(x.item())`: a plain
number from there on) and tests a small tensor made from it. Rank 0's root is 0, rank 1's is
90.5: rank 1 all-reduces while rank 0 waits in the barrier. The dry-run once filled the small
tensor with the placeholder (1) as a value it knew and took the test alike on both ranks."""

import math

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
base = torch.full((128, 64), float(rank))
root = math.sqrt(base.sum().item())  # 0 on rank 0, 90.5 on rank 1
if torch.full((1,), root).item() > 1.0:
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
