"""commlint accuracy benchmark program gpt_w2_0487.

family: gpt (dp+tp), world size 2
mutation: none (none): none (the unmutated program)

Run: torchrun --nproc-per-node 2 gpt_w2_0487.py
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
    blocks = []
    for layer in range(2):
        torch.manual_seed(2000 + 10 * layer + tp_rank)
        wq = torch.randn(8, 8 // TP) * 0.3
        wo = torch.randn(8 // TP, 8) * 0.3
        wf1 = torch.randn(8, 16 // TP) * 0.3
        wf2 = torch.randn(16 // TP, 8) * 0.3
        blocks.append((wq, wo, wf1, wf2))
    gen = torch.Generator().manual_seed(100 + dp_rank)
    for step in range(STEPS):
        tokens = torch.randn(8, 8, generator=gen)
        dist.broadcast(tokens, src=tp_leader, group=tp_group)
        h = tokens
        for wq, wo, wf1, wf2 in blocks:
            a = torch.tanh(h @ wq) @ wo
            dist.all_reduce(a, group=tp_group)
            h = h + a
            f = torch.relu(h @ wf1) @ wf2
            dist.all_reduce(f, group=tp_group)
            h = h + f
        local = h[:, tp_rank * (8 // TP) : (tp_rank + 1) * (8 // TP)].contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(tp_group))]
        dist.all_gather(parts, local, group=tp_group)
        h = torch.cat(parts, dim=1)
        bucket = torch.stack([h.mean(), h.std(), h.abs().max()])
        loss = h.pow(2).mean().reshape(1)
        dist.all_reduce(bucket, group=dp_group)
        dist.all_reduce(loss, group=world)
        for block in blocks:
            for w in block:
                w.mul_(1 - 0.01 * float(bucket[0]) / dp_size)
    return [
        (f"params/tp{tp_rank}", float(sum(w.sum() for b in blocks for w in b))),
        (f"act/dp{dp_rank}", float(h.sum())),
        ("loss", float(loss.sum())),
    ]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
