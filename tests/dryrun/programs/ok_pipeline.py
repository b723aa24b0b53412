"""Correct: two-stage pipeline with torch.distributed.pipelining, 1F1B, 4 microbatches."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
stage_mod = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=lambda out, tgt: out.sum())
x = torch.randn(8, 8)
if rank == 0:
    schedule.step(x)
elif rank == world - 1:
    schedule.step(target=torch.zeros(8, 8), losses=[])
else:
    schedule.step()
dist.destroy_process_group()
