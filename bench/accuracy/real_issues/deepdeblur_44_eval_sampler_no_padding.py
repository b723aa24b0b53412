# Reduced from https://github.com/SeungjunNah/DeepDeblur-PyTorch/issues/44
# Cause: DistributedEvalSampler does not pad, so with a dataset size not divisible by the
# number of processes the ranks get different numbers of evaluation batches; a per-batch
# synchronisation (here the metric all-reduce) leaves the rank with more batches waiting.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler, TensorDataset


class DistributedEvalSampler(Sampler):
    def __init__(self, dataset, num_replicas: int, rank: int) -> None:
        self.indices = list(range(len(dataset)))[rank::num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    dataset = TensorDataset(torch.randn(9, 3))
    sampler = DistributedEvalSampler(dataset, dist.get_world_size(), dist.get_rank())
    loader = DataLoader(dataset, batch_size=1, sampler=sampler)
    psnr_sum = torch.zeros(1)
    for (x,) in loader:
        psnr = x.abs().mean().reshape(1)
        dist.all_reduce(psnr)
        psnr_sum += psnr
    print(dist.get_rank(), float(psnr_sum))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
