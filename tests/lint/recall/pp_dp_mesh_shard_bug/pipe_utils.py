"""Stage construction for a dp x pp run."""
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


@dataclass
class PipeConfig:
    dim: int = 16
    num_samples: int = 29
    micro_batch: int = 2
    steps: int = 2
    lr: float = 0.05


def build_stage_module(stage_idx: int, dim: int) -> nn.Module:
    torch.manual_seed(100 + stage_idx)
    if stage_idx == 0:
        return nn.Sequential(nn.Linear(dim, dim), nn.GELU())
    return nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, 1))


def mse(out, target):
    return ((out - target) ** 2).mean()


def make_schedule(module, stage_idx, num_stages, pp_group, n_micro):
    stage = PipelineStage(module, stage_idx, num_stages, torch.device("cpu"), group=pp_group)
    return stage, ScheduleGPipe(stage, n_microbatches=n_micro, loss_fn=mse)
