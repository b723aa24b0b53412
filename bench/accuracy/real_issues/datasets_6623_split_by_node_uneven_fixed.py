# Reduced from https://github.com/huggingface/datasets/issues/6623
# Fix (maintainer's example): loop over the shard cyclically and all-reduce an "exhausted"
# flag every step; stop once every rank's data has been exhausted.
import os
from datetime import timedelta
from itertools import chain, cycle

import torch
import torch.distributed as dist


def split_dataset_by_node(examples: list[int], rank: int, world_size: int) -> list[int]:
    return examples[rank::world_size]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ds = split_dataset_by_node([1, 2, 3, 4, 5], rank=rank, world_size=world_size)
    exhausted = torch.zeros(world_size, dtype=torch.bool)
    for x in cycle(chain(ds, ["end"])):
        if x == "end":
            exhausted[rank] = True
            continue
        dist.all_reduce(exhausted, op=dist.ReduceOp.MAX)
        if torch.all(exhausted):
            break
        grad = torch.tensor([float(x)])
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
