"""Correct: rank 0 writes the run's sizes to a file while the others wait in a barrier, then
broadcasts how many steps to take; every rank reads the file and takes those steps."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
plan_file = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".plan-file-first.json")
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
for size in sizes[: steps[0]]:
    dist.all_reduce(torch.ones(size))
dist.barrier()
dist.destroy_process_group()
