"""FSDP2 with gradient accumulation over a rank's whole shard of a small dataset.
Real run (torchrun, 2 processes, gloo, CPU): hang: a rank timed out waiting for a peer."""
import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

log = logging.getLogger("accum")


@dataclass
class TrainConfig:
    dim: int = 16
    num_examples: int = 9
    micro_batch: int = 1
    epochs: int = 2


def contiguous_shard(items, rank, world):
    per = (len(items) + world - 1) // world
    return items[rank * per:(rank + 1) * per]


class Accumulator:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt

    def run_epoch(self, micro_batches):
        last = len(micro_batches) - 1
        for i, (x, y) in enumerate(micro_batches):
            # reduce-scatter gradients only on the last micro-batch
            self.model.set_requires_gradient_sync(i == last)  # expect: CL115
            loss = nn.functional.mse_loss(self.model(x), y) / len(micro_batches)
            loss.backward()
        self.opt.step()
        self.opt.zero_grad()


def main():
    cfg = TrainConfig()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.ReLU(), nn.Linear(cfg.dim, 1))
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    examples = [(torch.randn(cfg.micro_batch, cfg.dim), torch.randn(cfg.micro_batch, 1)) for _ in range(cfg.num_examples)]
    mine = contiguous_shard(examples, rank, world)
    acc = Accumulator(model, opt)
    for epoch in range(cfg.epochs):
        acc.run_epoch(mine)
        log.info("epoch %d done", epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
