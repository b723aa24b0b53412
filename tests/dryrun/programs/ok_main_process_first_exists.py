"""Correct: "main process first" with an existence test — rank 0 writes a cache file while the
others wait in a barrier; then every rank finds it and reads the size it holds."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
cache = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".cache-exists.txt")
if rank == 0:
    with open(cache, "w") as fh:
        fh.write("4\n")
dist.barrier()
if os.path.exists(cache):
    with open(cache) as fh:
        size = int(fh.read())
else:
    size = 8
dist.all_reduce(torch.ones(size))
dist.barrier()
if rank == 0:
    os.remove(cache)
