# nproc: 4
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; rank 0 ok, rank 1 ok, rank 2 ok, rank 3 ok)
import argparse
import itertools
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def build_replica_groups(world: int, replica: int, rank: int) -> dict:
    layouts = [list(range(start, start + replica)) for start in range(0, world, replica)]
    ordered = list(layouts)
    groups = {}
    for ranks in ordered:
        groups[tuple(ranks)] = dist.new_group(ranks)
    return groups


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replica", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = build_replica_groups(world, args.replica, rank)
    mine = next(g for ranks, g in groups.items() if rank in ranks)
    grad = torch.ones(8) * rank
    dist.all_reduce(grad, group=mine)
    log.info("reduced %s", grad[:2])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
