# Reduced from https://github.com/huggingface/transformers/pull/1081
# Cause: evaluation runs on the master process only, but the dataset loader it calls ends with
# the "first process builds the cache" barrier meant for training; rank 0 waits in it alone
# while the other ranks have already left.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def load_and_cache_examples(local_rank: int, evaluate: bool) -> torch.Tensor:
    if local_rank not in [-1, 0]:
        dist.barrier()  # the others wait until the first process has built the cache
    features = torch.arange(64, dtype=torch.float32).reshape(16, 4)
    if local_rank == 0:
        dist.barrier()  # the first process releases the others
    return features


def train(local_rank: int) -> None:
    data = load_and_cache_examples(local_rank, evaluate=False)
    grad = data.mean(0)
    dist.all_reduce(grad)


def evaluate(local_rank: int) -> float:
    data = load_and_cache_examples(local_rank, evaluate=True)
    return float(data.sum())


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    train(local_rank)
    if local_rank in [-1, 0]:
        print("eval:", evaluate(local_rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
