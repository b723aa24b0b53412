# nproc: 2
# report: https://github.com/facebookresearch/pytext/pull/585 (only rank 0 updated the best epoch; the other workers early-stopped and rank 0 hung)
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout in the gradient all_reduce, rank 1 ok after early stop)
import argparse
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer import Trainer


@dataclass
class TrainConfig:
    max_epochs: int = 8
    early_stop_after: int = 2
    batch_size: int = 8
    lr: float = 0.01


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "15"))))
    torch.manual_seed(0)
    cfg = TrainConfig(max_epochs=args.epochs)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    Trainer(model, opt, cfg).fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
