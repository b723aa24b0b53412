# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/4529
# Fix: compute() (which synchronises) runs on every rank; only the logging is on rank 0.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Accuracy:
    def __init__(self) -> None:
        self.correct = torch.zeros(1)
        self.total = torch.zeros(1)

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.correct += (preds == target).sum()
        self.total += target.numel()

    def compute(self) -> float:
        state = torch.cat([self.correct, self.total])
        parts = [torch.zeros_like(state) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, state)
        total = torch.stack(parts).sum(0)
        self.correct.zero_()
        self.total.zero_()
        return float(total[0] / total[1])


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    global_rank = dist.get_rank()
    metric = Accuracy()
    for _ in range(3):
        metric.update(torch.randint(0, 3, (8,)), torch.randint(0, 3, (8,)))
    out = metric.compute()
    if global_rank == 0:
        print("metric", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
