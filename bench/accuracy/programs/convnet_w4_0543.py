"""commlint accuracy benchmark program convnet_w4_0543.

family: convnet (dp+tp, 4 branches), world size 4
mutation: none (none): none (the unmutated program)

Run: torchrun --nproc-per-node 4 convnet_w4_0543.py
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
    torch.manual_seed(4000 + tp_rank)
    k1 = torch.randn(4, 3, 1, 1) * 0.3
    k2 = torch.randn(4, 3, 3, 3) * 0.3
    k3 = torch.randn(6, 3, 3, 3) * 0.3
    k4 = torch.randn(2, 3, 1, 1) * 0.3
    gen = torch.Generator().manual_seed(100 + dp_rank)
    for step in range(STEPS):
        x = torch.randn(2, 3, 6, 6, generator=gen)
        b1 = torch.nn.functional.conv2d(x, k1)
        dist.all_reduce(b1, group=tp_group)
        b2 = torch.nn.functional.conv2d(x, k2, padding=1)
        s2 = torch.stack([b2.mean(), b2.var()])
        dist.all_reduce(s2, group=world)
        b3 = torch.nn.functional.conv2d(x, k3, padding=1)
        dist.all_reduce(b3, group=tp_group)
        b4 = torch.nn.functional.conv2d(x, k4)
        s4 = torch.stack([b4.mean(), b4.var(), b4.abs().max()])
        dist.all_reduce(s4, group=dp_group)
        grads = torch.stack([b1.mean(), b3.mean(), s2[0], s4[0]])
        dist.all_reduce(grads, group=dp_group)
        for k, gk in zip((k1, k2, k3, k4), grads):
            k.sub_(0.01 * float(gk) / dp_size)
        dist.barrier(group=world)
    return [
        (f"params/tp{tp_rank}", float(k1.sum() + k2.sum() + k3.sum() + k4.sum())),
        (f"act/dp{dp_rank}", float(b1.sum() + b3.sum())),
        ("bn/world", float(s2.sum())),
        (f"bn/tp{tp_rank}", float(s4.sum())),
    ]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
