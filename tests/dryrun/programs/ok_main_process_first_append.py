"""Correct: accelerate's `main_process_first` check — the main process appends its line while
the others wait in a barrier, then each other rank appends its own; the main process then
finds its line first."""

import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
path = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".main-first-append.txt")
if rank != 0:
    dist.barrier()  # the others wait for the main process
with open(path, "a+") as fh:
    fh.write("main\n" if rank == 0 else "other\n")
if rank == 0:
    dist.barrier()  # the main process releases them
dist.barrier()
if rank == 0:
    with open(path) as fh:
        text = fh.read()
    os.remove(path)
    assert text.startswith("main\n") and text.count("other\n") == world - 1, text
dist.barrier()
dist.destroy_process_group()
