"""Correct: "main process first" — rank 0 writes a cache file while the others wait in a
barrier, then every rank reads it."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
cache = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".cache-main-first.txt")
if rank == 0:
    with open(cache, "w") as fh:
        fh.write("4\n")
dist.barrier()
with open(cache) as fh:
    size = int(fh.read())
dist.all_reduce(torch.ones(size))
dist.barrier()
if rank == 0:
    os.remove(cache)
