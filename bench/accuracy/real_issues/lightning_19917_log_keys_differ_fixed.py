# Reduced from https://github.com/Lightning-AI/pytorch-lightning/pull/19917
# Fix (the docstring's rule): every rank logs the same keys; a rank that saw no sample of a
# class logs a count of zero for it.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class ResultCollection:
    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}

    def log(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def reduce_epoch_end(self) -> dict[str, float]:
        out = {}
        for key in sorted(self.values):
            t = torch.tensor(sum(self.values[key]))
            dist.all_reduce(t)
            out[key] = float(t)
        return out


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    labels = torch.tensor([0, 1, 2, 0, 1, 0, 1, 1])[rank::2]
    results = ResultCollection()
    for step, y in enumerate(labels.tolist()):
        results.log("val_loss", 1.0 / (step + 1))
        results.log("val_hits_class2", 1.0 if y == 2 else 0.0)
    print(rank, results.reduce_epoch_end())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
