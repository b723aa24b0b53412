"""commlint accuracy benchmark program accelerate_w8_0688.

family: accelerate (accelerate (DDP)), world size 8
mutation: none (none): none (the unmutated program)

Run: torchrun --nproc-per-node 8 accelerate_w8_0688.py
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
    from accelerate import Accelerator

    # accelerate reads the launcher's environment (torchrun, `accelerate launch`)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    os.environ.update(LOCAL_WORLD_SIZE=str(world_size))
    world = dist.new_group(list(range(world_size)), timeout=timeout)
    probe_gen = torch.Generator().manual_seed(500 + rank)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(8000)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    model, opt = accelerator.prepare(net, opt)
    gen = torch.Generator().manual_seed(100 + rank)
    loss = torch.zeros(())
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=gen)
        loss = (model(x) - 1.0).pow(2).mean()
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        lossv = loss.detach().reshape(1)
        gathered = accelerator.gather(lossv)
        dist.all_reduce(lossv, group=world)
    return [("params", float(sum(p.sum() for p in net.parameters()))), ("loss", float(lossv.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
