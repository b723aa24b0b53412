"""Tensor-parallel MLP (colwise + rowwise) on a (dp=2, tp=2) mesh, trained on sharded rows.
Real run (torchrun, 4 processes, gloo, CPU): ok: every rank returned."""
import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("tp")


@dataclass
class Cfg:
    dim: int = 16
    rows: int = 22
    batch: int = 2
    epochs: int = 1


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def shard_rows(x, y, index, count):
    per = -(-len(x) // count)
    return TensorDataset(x[index * per:(index + 1) * per], y[index * per:(index + 1) * per])


def main():
    cfg = Cfg()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = parallelize_module(MLP(cfg.dim), mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(cfg.rows, cfg.dim, generator=g), torch.randn(cfg.rows, cfg.dim, generator=g)
    # the two tp ranks of a replica must see the same rows: shard by the dp coordinate
    data = shard_rows(x, y, mesh["dp"].get_local_rank(), mesh["dp"].size())
    loader = DataLoader(data, batch_size=cfg.batch)
    for epoch in range(cfg.epochs):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
        log.info("epoch %d done", epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
