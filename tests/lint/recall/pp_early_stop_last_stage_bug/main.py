"""Pipeline-parallel regression with early stopping (two stages, GPipe).
Real run (torchrun, 2 processes, gloo, CPU): failed (a rank left while its peer waited on it)."""
import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

logger = logging.getLogger("regress")


@dataclass
class Config:
    hidden: int = 24
    batch: int = 12
    microbatches: int = 3
    max_steps: int = 40
    tolerance: float = 5.0
    seeds: list = field(default_factory=lambda: [0, 1])


class EarlyStopper:
    def __init__(self, tolerance):
        self.tolerance = tolerance
        self.should_stop = False

    def update(self, loss):
        if loss < self.tolerance:
            self.should_stop = True


def mse(a, b):
    return nn.functional.mse_loss(a, b)


def main():
    cfg = Config()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank = dist.get_rank()
    torch.manual_seed(cfg.seeds[rank])
    if rank == 0:
        mod = nn.Sequential(nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU())
    else:
        mod = nn.Linear(cfg.hidden, 1)
    stage = PipelineStage(mod, rank, 2, torch.device("cpu"))
    sched = ScheduleGPipe(stage, cfg.microbatches, loss_fn=mse)
    opt = torch.optim.SGD(mod.parameters(), lr=1e-3)
    stopper = EarlyStopper(cfg.tolerance)
    data = torch.Generator().manual_seed(7)
    for step in range(cfg.max_steps):
        x = torch.randn(cfg.batch, cfg.hidden, generator=data)
        y = x.mean(dim=1, keepdim=True)
        opt.zero_grad()
        if rank == 0:
            sched.step(x)
        else:
            losses = []
            sched.step(target=y, losses=losses)
            stopper.update(sum(l.item() for l in losses) / len(losses))
        opt.step()
        if stopper.should_stop:  # expect: CL103
            logger.info("stopping at step %d", step)
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
