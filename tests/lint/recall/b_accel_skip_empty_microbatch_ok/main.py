# nproc: 2
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; rank 0 ok, rank 1 ok)
import argparse
import os
from datetime import timedelta

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs

from train_utils import IGNORE, accumulate_step


def make_batches(process_index: int, steps: int, bsz: int = 4):
    g = torch.Generator().manual_seed(100 + process_index)
    batches = []
    for step in range(steps):
        labels = torch.randint(0, 2, (bsz,), generator=g)
        if process_index == 1 and step == 1:
            labels[bsz // 2 :] = IGNORE  # padding-only tail on this shard
        batches.append({"features": torch.randn(bsz, 6, generator=g), "labels": labels})
    return batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--micro", type=int, default=2)
    args = ap.parse_args()
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30")))
    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="gloo", timeout=timeout)])
    model = torch.nn.Linear(6, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in make_batches(accelerator.process_index, args.steps):
        accumulate_step(accelerator, model, optimizer, batch, args.micro)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
