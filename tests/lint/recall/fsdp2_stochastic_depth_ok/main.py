"""FSDP2 training of a deep residual MLP with layer drop.
Real run (torchrun, 2 processes, gloo, CPU): ok: every rank returned."""
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from model import DeepMLP, shard_model


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--drop", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def main():
    args = parse()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    # layer-drop decisions come from a generator seeded alike on every rank
    drop_gen = torch.Generator().manual_seed(args.seed)
    model = shard_model(DeepMLP(args.dim, args.depth, args.drop, generator=drop_gen))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data_gen = torch.Generator().manual_seed(args.seed + rank)
    for step in range(args.steps):
        x = torch.randn(8, args.dim, generator=data_gen)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
