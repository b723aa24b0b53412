"""Two-stage 1F1B pipeline with a validation pass after every epoch.
Real run (torchrun, 2 processes, gloo, CPU): ok: every rank returned."""
import argparse
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from trainer import PipelineTrainer

log = logging.getLogger("pp")


def stage_module(index, hidden):
    torch.manual_seed(index)
    layers = [nn.Linear(hidden, hidden), nn.Tanh()]
    if index == 1:
        layers.append(nn.Linear(hidden, 4))
    return nn.Sequential(*layers)


def batches(n, bs, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(bs, hidden, generator=g)
        yield x, x[:, :4].cos()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    logging.basicConfig(level=logging.INFO, format=f"[stage {rank}] %(message)s")
    trainer = PipelineTrainer(stage_module(rank, args.hidden), rank, world, args.chunks)
    for epoch in range(args.epochs):
        for x, y in batches(3, args.batch_size, args.hidden, seed=epoch):
            loss = trainer.train_step(x, y)
        for x, y in batches(1, args.batch_size, args.hidden, seed=1000 + epoch):
            val = trainer.validate(x, y)
        if trainer.is_last:
            log.info("epoch %d train %.4f val %.4f", epoch, loss, val)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
