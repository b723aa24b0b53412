"""A small pipeline trainer: one stage per process, 1F1B schedule."""
import logging

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

log = logging.getLogger("pp.trainer")


def _loss(pred, target):
    return torch.nn.functional.mse_loss(pred, target)


class PipelineTrainer:
    def __init__(self, module, stage_index, num_stages, n_microbatches, lr=0.01):
        self.module = module
        self.stage = PipelineStage(module, stage_index, num_stages, torch.device("cpu"))
        self.schedule = Schedule1F1B(self.stage, n_microbatches=n_microbatches, loss_fn=_loss)
        self.optim = torch.optim.AdamW(module.parameters(), lr=lr)

    @property
    def is_first(self):
        return self.stage.is_first

    @property
    def is_last(self):
        return self.stage.is_last

    def train_step(self, inputs, targets):
        self.optim.zero_grad()
        losses = []
        if self.is_first:
            self.schedule.step(inputs)
        else:
            self.schedule.step(target=targets, losses=losses)
        self.optim.step()
        return torch.stack(losses).mean().item() if losses else None

    def validate(self, inputs, targets):
        losses = []
        if self.is_first:
            self.schedule.eval(inputs)
            return None
        self.schedule.eval(target=targets, losses=losses)
        return torch.stack(losses).mean().item()
