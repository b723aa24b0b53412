# Reduced from https://github.com/SeungjunNah/DeepDeblur-PyTorch/issues/44
# Fix (the author's advice): with per-batch synchronisation, use torch's DistributedSampler,
# which pads the dataset so every rank gets the same number of batches.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    dataset = TensorDataset(torch.randn(9, 3))
    sampler = DistributedSampler(dataset, shuffle=False)
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
