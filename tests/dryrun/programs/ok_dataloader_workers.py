"""Correct: DDP fed by a DataLoader with worker processes and a DistributedSampler."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

if __name__ == "__main__":
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data), num_workers=2)
    model = DDP(nn.Linear(4, 2))
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
    dist.destroy_process_group()
