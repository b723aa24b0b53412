"""Broken: rank 1 leaves with sys.exit(0) before the last collective; rank 0 waits."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
if dist.get_rank() == 1:
    sys.exit(0)
dist.barrier()
