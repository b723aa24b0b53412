"""Correct: rank 0 decides the plan (how many steps) at run time and broadcasts it as an
object; every rank follows it. The step count differs from the ranks' own guess."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
plan = [{"steps": 3, "sizes": [4, 8, 2]}] if rank == 0 else [None]
dist.broadcast_object_list(plan, src=0)
for size in plan[0]["sizes"][: plan[0]["steps"]]:
    dist.all_reduce(torch.ones(size))
names = [None] * dist.get_world_size()
dist.all_gather_object(names, f"worker-{rank}")
assert names[1] == "worker-1"
dist.destroy_process_group()
