# nproc: 2
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 timeout)
import argparse
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer import TrainConfig, Trainer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    cfg = TrainConfig(steps=args.steps, ckpt_dir=tempfile.mkdtemp())
    trainer = Trainer(cfg, torch.nn.Linear(4, 1))
    batches = [torch.randn(8, 4) for _ in range(cfg.steps)]
    trainer.fit(batches)  # expect: CL115
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
