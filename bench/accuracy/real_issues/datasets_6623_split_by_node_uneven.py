# Reduced from https://github.com/huggingface/datasets/issues/6623
# Cause: a 5-example stream split by node gives 3 examples to one rank and 2 to the other;
# the training loop all-reduces per example, so the rank with 3 waits for a partner that has
# already finished.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def split_dataset_by_node(examples: list[int], rank: int, world_size: int) -> list[int]:
    return examples[rank::world_size]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ds = split_dataset_by_node([1, 2, 3, 4, 5], rank=rank, world_size=world_size)
    for x in ds:
        grad = torch.tensor([float(x)])
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
