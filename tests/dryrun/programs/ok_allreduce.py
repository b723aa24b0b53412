"""Correct: every rank all-reduces, then a barrier."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4) * rank
dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
