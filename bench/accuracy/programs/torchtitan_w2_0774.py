"""commlint accuracy benchmark program torchtitan_w2_0774.

family: torchtitan (torchtitan utilities (FSDP2)), world size 2
mutation: data_cond (harmless): log_ar under a data test that is true on every rank

Run: torchrun --nproc-per-node 2 torchtitan_w2_0774.py
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
    from torch.distributed.fsdp import fully_shard
    from torchtitan.distributed import utils as tt

    world = dist.new_group(list(range(world_size)), timeout=timeout)
    dp_group = dist.new_group(list(range(world_size)), timeout=timeout)
    probe_gen = torch.Generator().manual_seed(500 + rank)
    torch.manual_seed(9800)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    mesh = DeviceMesh.from_group(dp_group, "cpu")
    fully_shard(net[0], mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(100 + rank)
    loss = torch.zeros(())
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=gen)
        loss = (net(x) - 1.0).pow(2).mean()
        loss.backward()
        grad_norm = tt.clip_grad_norm_(net.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad()
        lossv = loss.detach().reshape(1)
        mean_loss = tt.dist_mean(lossv, mesh)
        max_loss = tt.dist_max(lossv, mesh)
        probe = torch.rand(1, generator=probe_gen)
        if float(probe) >= 0.0:
            dist.all_reduce(lossv, group=world)
    return [("loss", float(lossv.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
