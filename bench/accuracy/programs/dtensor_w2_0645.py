"""commlint accuracy benchmark program dtensor_w2_0645.

family: dtensor (DTensor TP), world size 2
mutation: wrong_group (harmless): log_ar on world_twin (same members as world) on every rank

Run: torchrun --nproc-per-node 2 dtensor_w2_0645.py
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = float(os.environ.get("ACC_TIMEOUT", "10"))
STEPS = 3
TP = 2


def is_main_process() -> bool:
    return dist.get_rank() == 0


def main(rank: int, world_size: int) -> list[tuple[str, float]]:
    timeout = timedelta(seconds=TIMEOUT)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    world = dist.new_group(list(range(world_size)), timeout=timeout)
    tp_group = dp_group = None
    for start in range(0, world_size, TP):
        ranks = list(range(start, start + TP))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            tp_group = group
    for first in range(TP):
        ranks = list(range(first, world_size, TP))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            dp_group = group
    tp_rank, dp_rank = rank % TP, rank // TP
    tp_leader = rank - tp_rank
    dp_size = world_size // TP
    probe_gen = torch.Generator().manual_seed(500 + rank)
    world_twin = dist.new_group(list(range(world_size)), timeout=timeout)
    torch.manual_seed(7000)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    mesh = DeviceMesh.from_group(tp_group, "cpu")
    parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(mlp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + dp_rank)
    loss = torch.zeros(())
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=gen)
        y = mlp(x)
        loss = (y - 1.0).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        lossv = loss.detach().reshape(1)
        dist.all_reduce(lossv, group=world_twin)
    return [(f"act/dp{dp_rank}", float(y.sum())), ("loss", float(lossv.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
