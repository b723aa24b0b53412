# Reduced from https://github.com/huggingface/transformers/pull/1081
# Fix: both cache barriers are skipped when loading the evaluation set (`and not evaluate`),
# since only the master process evaluates.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def load_and_cache_examples(local_rank: int, evaluate: bool) -> torch.Tensor:
    if local_rank not in [-1, 0] and not evaluate:
        dist.barrier()
    features = torch.arange(64, dtype=torch.float32).reshape(16, 4)
    if local_rank == 0 and not evaluate:
        dist.barrier()
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
