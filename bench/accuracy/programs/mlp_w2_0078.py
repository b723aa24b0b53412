"""commlint accuracy benchmark program mlp_w2_0078.

family: mlp (dp+tp), world size 2
mutation: none (none): none (the unmutated program)

Run: torchrun --nproc-per-node 2 mlp_w2_0078.py
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
    torch.manual_seed(1000 + tp_rank)
    w1 = torch.randn(8, 8 // TP) * 0.3
    w2 = torch.randn(8 // TP, 8) * 0.3
    dist.broadcast(w1, src=tp_rank, group=dp_group)
    gen = torch.Generator().manual_seed(100 + dp_rank)
    for step in range(STEPS):
        x = torch.randn(4, 8, generator=gen)
        h = torch.relu(x @ w1)
        y = h @ w2
        dist.all_reduce(y, group=tp_group)
        err = y - x
        g2 = h.t() @ err / 4
        g1 = x.t() @ ((err @ w2.t()) * (h > 0)) / 4
        dist.all_reduce(g1, group=dp_group)
        dist.all_reduce(g2, group=dp_group)
        w1 -= 0.05 * g1 / dp_size
        w2 -= 0.05 * g2 / dp_size
        loss = err.pow(2).mean().reshape(1)
        dist.all_reduce(loss, group=world)
        dist.barrier(group=world)
    return [
        (f"w1/tp{tp_rank}", float(w1.sum())),
        (f"w2/tp{tp_rank}", float(w2.sum())),
        (f"act/dp{dp_rank}", float(y.sum())),
        ("loss", float(loss.sum())),
    ]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
