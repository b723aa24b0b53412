"""Broken: only its member creates a one-rank group, so every later group is named differently
on each rank (new_group's name counts calls) and the pair's rendezvous never completes."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    solo = dist.new_group([0])
pair = dist.new_group([0, 1])
dist.all_reduce(torch.ones(4), group=pair)
dist.destroy_process_group()
