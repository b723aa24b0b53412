# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/13498
# Fix: the ranks agree on the number of batches (the minimum over ranks) before the epoch and
# every rank stops after that many.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset


class StreamShard(IterableDataset):
    def __init__(self, rank: int) -> None:
        self.length = 6 + 2 * rank

    def __iter__(self):
        for i in range(self.length):
            yield torch.randn(32)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    layer = torch.nn.Linear(32, 2)
    shard = StreamShard(dist.get_rank())
    loader = DataLoader(shard, batch_size=2)
    n_batches = torch.tensor((shard.length + 1) // 2)
    dist.all_reduce(n_batches, op=dist.ReduceOp.MIN)
    for i, batch in enumerate(loader):
        if i >= int(n_batches):
            break
        loss = layer(batch).sum()
        loss.backward()
        for p in layer.parameters():
            dist.all_reduce(p.grad)
            p.grad = None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
