"""Correct: every rank creates every group, in the same order, and keeps its own."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
solos = [dist.new_group([r]) for r in range(dist.get_world_size())]
pair = dist.new_group([0, 1])
dist.all_reduce(torch.ones(4), group=pair)
dist.all_reduce(torch.ones(4), group=solos[rank])
dist.destroy_process_group()
