"""A hand-written ZeRO-style gradient sharder that gives each rank the parameters whose index
is its rank modulo the world size: the ranks own parameters of different sizes (the MLP's
weights are 10x20, 20x7 and 7x1), so their reduce-scatters have different shard sizes."""

import torch
import torch.distributed as dist
from torch import nn


class GradSharder:
    def __init__(self, params, rank, world):
        self.world = world
        self.owned = [p for i, p in enumerate(params) if i % world == rank]

    def shard_size(self):
        return sum(p.numel() for p in self.owned) // self.world

    def reduce(self):
        flat = torch.cat([p.grad.reshape(-1) for p in self.owned])
        out = torch.empty(self.shard_size())
        dist.reduce_scatter_tensor(out, flat[: out.numel() * self.world])  # expect: CL116
        return out


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Sequential(
        nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 7), nn.ReLU(), nn.Linear(7, 1)
    )
    sharder = GradSharder(list(model.parameters()), rank, world)
    for _step in range(3):
        model(torch.randn(5, 10)).mean().backward()
        sharder.reduce()
        model.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
