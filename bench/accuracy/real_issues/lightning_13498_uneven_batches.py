# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/13498
# Cause: a streamed dataset gives each worker a different number of training batches; every
# step all-reduces gradients, so the worker with more batches waits at the end of the epoch.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset


class StreamShard(IterableDataset):
    def __init__(self, rank: int) -> None:
        self.length = 6 + 2 * rank  # shards of a stream are not the same size

    def __iter__(self):
        for i in range(self.length):
            yield torch.randn(32)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    layer = torch.nn.Linear(32, 2)
    loader = DataLoader(StreamShard(dist.get_rank()), batch_size=2)
    for batch in loader:
        loss = layer(batch).sum()
        loss.backward()
        for p in layer.parameters():
            dist.all_reduce(p.grad)
            p.grad = None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
