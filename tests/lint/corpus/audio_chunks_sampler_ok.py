"""The same clip bank read through a DistributedSampler: every rank gets the same number of
batches (the sampler pads the last ranks), so the gradient all-reduces pair up."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def clip_bank(count=22, frames=80):
    return TensorDataset(torch.randn(count, frames), torch.zeros(count, dtype=torch.long))


def main():
    dist.init_process_group("gloo")
    bank = clip_bank()
    batches = DataLoader(bank, batch_size=4, sampler=DistributedSampler(bank))
    weights = torch.zeros(80)
    for clips, _labels in batches:
        grad = clips.mean(0)
        dist.all_reduce(grad)
        weights -= grad
    dist.barrier()


if __name__ == "__main__":
    main()
