# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/379
# Fix (Lightning PR #2467): every rank all-reduces its stop flag and all ranks stop together
# as soon as any rank decides to stop.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class ThresholdStopping:
    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.should_stop = False

    def on_validation_end(self, val_acc: float) -> None:
        local = torch.tensor(1.0 if val_acc > self.threshold else 0.0)
        dist.all_reduce(local, op=dist.ReduceOp.SUM)
        self.should_stop = bool(local.item() > 0)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    weight = torch.zeros(8)
    val_x = torch.linspace(0, 1, 16)[rank::2]
    stopper = ThresholdStopping(threshold=0.52)
    for epoch in range(6):
        grad = torch.ones(8) * (epoch + 1)
        dist.all_reduce(grad)
        weight -= 0.01 * grad
        val_acc = float(val_x.mean()) + 0.01 * epoch
        stopper.on_validation_end(val_acc)
        if stopper.should_stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
