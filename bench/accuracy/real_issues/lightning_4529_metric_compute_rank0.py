# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/4529
# Cause: metric.compute() synchronises the metric state across ranks (a gather of the
# per-rank states); calling it under `if self.global_rank == 0:` followed by a barrier leaves
# rank 0 in the metric's gather and rank 1 in the barrier.
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
        dist.all_gather(parts, state)  # dist_sync_on_step / sync at compute
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
    # validation_epoch_end
    if global_rank == 0:
        out = metric.compute()
        print("metric", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
