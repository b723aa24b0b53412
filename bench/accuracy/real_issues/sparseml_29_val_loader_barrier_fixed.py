# Reduced from https://github.com/neuralmagic/sparseml/pull/29
# Fix: the worker barrier is removed from the validation loader the main worker runs alone;
# the training loader keeps it (every worker loads the training set).
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def load_dataset(split: str, sync_workers: bool) -> torch.Tensor:
    data = torch.arange(40, dtype=torch.float32).view(10, 4)
    if sync_workers:
        dist.barrier()
    return data


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    is_main = dist.get_rank() == 0
    train = load_dataset("train", sync_workers=True)
    grad = train.mean(0)
    dist.all_reduce(grad)
    if is_main:
        val = load_dataset("val", sync_workers=False)
        print("val mean", float(val.mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
