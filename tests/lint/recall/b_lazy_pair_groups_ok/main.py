# nproc: 4
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; rank 0 ok, rank 1 ok, rank 2 ok, rank 3 ok)
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from groups import GroupRegistry


class PairAverager:
    """Averages parameters within fixed pairs of ranks (gossip-style)."""

    def __init__(self, registry: GroupRegistry, world: int):
        self.registry = registry
        self.pairs = [[r, r + 1] for r in range(0, world, 2)]
        for pair in self.pairs:
            registry.get(pair)  # every rank creates every group, in one order

    def my_pair(self, rank):
        return next(p for p in self.pairs if rank in p)

    def average(self, model, rank):
        pair = self.my_pair(rank)
        group = self.registry.get(pair)
        for p in model.parameters():
            dist.all_reduce(p.data, group=group)
            p.data /= len(pair)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(4, 4)
    averager = PairAverager(GroupRegistry(), world)
    for _ in range(args.rounds):
        averager.average(model, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
