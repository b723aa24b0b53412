# Reduced from https://github.com/neuralmagic/sparseml/pull/29
# Cause: only the main worker downloads and runs the validation set, but the validation
# dataset loader kept a worker barrier; the main worker waits in it for processes that never
# enter that code.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def load_dataset(split: str, is_main: bool) -> torch.Tensor:
    data = torch.arange(40, dtype=torch.float32).view(10, 4)
    dist.barrier()  # wait for the other workers before using the downloaded files
    return data


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    is_main = dist.get_rank() == 0
    train = load_dataset("train", is_main)
    grad = train.mean(0)
    dist.all_reduce(grad)
    if is_main:
        val = load_dataset("val", is_main)
        print("val mean", float(val.mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
