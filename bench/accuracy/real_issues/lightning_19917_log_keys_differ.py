# Reduced from https://github.com/Lightning-AI/pytorch-lightning/pull/19917
# Cause: ranks log different metric keys (a key is logged only when a rank saw a class in its
# own shard); at epoch end each logged key is reduced with sync_dist, so the ranks issue
# different numbers of all-reduces and one waits for a reduction the other never makes.
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
            t = torch.tensor(sum(self.values[key]) / len(self.values[key]))
            dist.all_reduce(t)  # sync_dist=True
            out[key] = float(t) / dist.get_world_size()
        return out


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    labels = torch.tensor([0, 1, 2, 0, 1, 0, 1, 1])[rank::2]  # rank 1 never sees class 2
    results = ResultCollection()
    for step, y in enumerate(labels.tolist()):
        results.log("val_loss", 1.0 / (step + 1))
        if y == 2:
            results.log("val_acc_class2", 1.0)
    print(rank, results.reduce_epoch_end())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
