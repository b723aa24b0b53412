"""commlint accuracy benchmark program encdec_w8_0068.

family: encdec (pp+dp), world size 8
mutation: wrong_group (bug): xchg_send_b on pp_twin (same members as pp_group); its peer stays on pp_group

Run: torchrun --nproc-per-node 8 encdec_w8_0068.py
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
    pp_group = dp_group = None
    for start in range(0, world_size, TP):
        ranks = list(range(start, start + TP))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            pp_group = group
    for first in range(TP):
        ranks = list(range(first, world_size, TP))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            dp_group = group
    tp_rank, dp_rank = rank % TP, rank // TP
    tp_leader = rank - tp_rank
    dp_size = world_size // TP
    probe_gen = torch.Generator().manual_seed(500 + rank)
    stage = rank % 2
    peer = rank + 1 if stage == 0 else rank - 1
    pp_twin = None
    for start in range(0, world_size, TP):
        ranks = list(range(start, start + TP))
        group = dist.new_group(ranks, timeout=timeout)
        if rank in ranks:
            pp_twin = group
    torch.manual_seed(3000 + stage)
    w = torch.randn(8, 8) * 0.3
    gen = torch.Generator().manual_seed(100 + dp_rank)
    for step in range(STEPS):
        mine = torch.tensor([float(step + stage)])
        theirs = torch.empty(1)
        if stage == 0:
            dist.send(mine, dst=peer, group=pp_group)
            dist.recv(theirs, src=peer, group=pp_group)
        else:
            dist.recv(theirs, src=peer, group=pp_group)
            dist.send(mine, dst=peer, group=pp_twin)
        if stage == 0:
            src = torch.randn(4, 8, generator=gen)
            mem = torch.tanh(src @ w)
            header = torch.tensor([float(mem.shape[0]), float(mem.shape[1])])
            dist.send(header, dst=peer, group=pp_group)
            dist.send(mem, dst=peer, group=pp_group)
            grad = torch.empty(4, 8)
            dist.recv(grad, src=peer, group=pp_group)
            g = src.t() @ (grad * (1 - mem.pow(2))) / 4
            out = mem
        else:
            header = torch.zeros(2)
            dist.recv(header, src=peer, group=pp_group)
            mem = torch.empty(int(header[0]), int(header[1]))
            dist.recv(mem, src=peer, group=pp_group)
            out = mem @ w
            grad = (out - 1.0) @ w.t() / 4
            dist.send(grad, dst=peer, group=pp_group)
            g = mem.t() @ (out - 1.0) / 4
        dist.all_reduce(g, group=dp_group)
        w -= 0.05 * g / dp_size
        loss = out.pow(2).mean().reshape(1)
        dist.all_reduce(loss, group=world)
    return [(f"params/stage{stage}", float(w.sum())), ("loss", float(loss.sum()))]


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    print(main(dist.get_rank(), dist.get_world_size()), flush=True)
    dist.destroy_process_group()
