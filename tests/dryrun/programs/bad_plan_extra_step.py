"""Broken: rank 0 writes the sizes to a file before a barrier and broadcasts the step count;
the last rank takes one step more than the count: its extra all-reduce meets the others'
barrier."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
plan_file = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".plan-extra-step.json")
if rank == 0:
    with open(plan_file, "w") as fh:
        json.dump({"sizes": [4, 8, 2, 6]}, fh)
dist.barrier()
with open(plan_file) as fh:
    sizes = json.load(fh)["sizes"]
dist.barrier()  # every rank has read it
if rank == 0:
    os.remove(plan_file)
steps = [3 if rank == 0 else None]
dist.broadcast_object_list(steps, src=0)
extra = 1 if rank == dist.get_world_size() - 1 else 0
for size in sizes[: steps[0] + extra]:
    dist.all_reduce(torch.ones(size))  # the last rank's fourth call
dist.barrier()
dist.destroy_process_group()
