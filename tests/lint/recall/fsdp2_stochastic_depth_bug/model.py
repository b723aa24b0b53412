"""A residual MLP with stochastic depth (layer drop)."""
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class DeepMLP(nn.Module):
    def __init__(self, dim, depth, drop_prob, generator=None):
        super().__init__()
        self.blocks = nn.ModuleList(ResidualBlock(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)
        self.drop_prob = drop_prob
        self.generator = generator

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(1, generator=self.generator).item() < self.drop_prob:  # expect: CL103
                continue  # drop this block for the whole batch
            x = block(x)
        return self.head(x)


def shard_model(model, reshard_after_forward=True):
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model
