"""Rank 1 computes (here: sleeps) outside any communication call for longer than the guard
timeout while rank 0 waits in all_reduce: slow, not provably hung."""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(3)
dist.all_reduce(t)
if rank == 1:
    time.sleep(float(sys.argv[1]))  # the line the stall report names
dist.all_reduce(t)
# one write of the whole line: the ranks share one pipe
sys.stdout.write(f"rank {rank} result {t.tolist()}\n")
sys.stdout.flush()
dist.destroy_process_group()
