# Reduced from https://github.com/pytorch/torchtitan/issues/1618
# Fix (torchtitan PR #1634): validation runs a fixed number of steps by default, small enough
# that no rank exhausts its shard first.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def build_validation_shard(rank: int, world_size: int) -> list[torch.Tensor]:
    docs = [torch.randn(5 + (i * 7) % 11) for i in range(23)]
    tokens = torch.cat(docs[rank::world_size])
    seq_len = 8
    return list(tokens[: len(tokens) // seq_len * seq_len].view(-1, seq_len))


def validate(shard: list[torch.Tensor], steps: int) -> float:
    total = torch.zeros(1)
    for i, batch in enumerate(shard):
        if steps != -1 and i >= steps:
            break
        loss = batch.pow(2).mean().reshape(1)
        dist.all_reduce(loss)
        total += loss
    return float(total)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    torch.manual_seed(0)
    shard = build_validation_shard(dist.get_rank(), dist.get_world_size())
    print(dist.get_rank(), len(shard), validate(shard, steps=4))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
