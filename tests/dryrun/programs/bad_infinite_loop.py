"""Broken: rank 1 spins forever waiting for a file that never appears."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    while not os.path.exists("/nonexistent/ready"):
        pass
dist.all_reduce(torch.ones(2))
dist.destroy_process_group()
