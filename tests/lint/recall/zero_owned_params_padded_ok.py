"""The same sharder done right: every rank flattens every parameter and pads the flat buffer
to a multiple of the world size, so every rank's shard has the same size."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class GradSharder:
    def __init__(self, params, world):
        self.world = world
        self.params = list(params)

    def shard_size(self):
        return -(-sum(p.numel() for p in self.params) // self.world)

    def reduce(self):
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        flat = F.pad(flat, (0, self.shard_size() * self.world - flat.numel()))
        out = torch.empty(self.shard_size())
        dist.reduce_scatter_tensor(out, flat)
        return out


def main():
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    model = nn.Sequential(
        nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 7), nn.ReLU(), nn.Linear(7, 1)
    )
    sharder = GradSharder(model.parameters(), world)
    for _step in range(3):
        model(torch.randn(5, 10)).mean().backward()
        sharder.reduce()
        model.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
