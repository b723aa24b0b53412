"""DistributedSampler gives every rank the same number of batches."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def evaluate(model, dataset, batch_size):
    sampler = DistributedSampler(dataset, rank=dist.get_rank(), shuffle=False)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    total = torch.zeros(2)
    for x, y in loader:
        pred = model(x).argmax(-1)
        total += torch.tensor([(pred == y).sum().item(), len(y)])
    dist.all_reduce(total)
    return (total[0] / total[1]).item()
