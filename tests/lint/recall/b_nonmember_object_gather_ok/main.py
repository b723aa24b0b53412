# nproc: 4
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; rank 0 ok, rank 1 ok, rank 2 ok, rank 3 ok)
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def collect_leader_stats(stats: dict, leaders_group, leaders: list[int]):
    """Only the node leaders exchange their stats; the others return at once (torch skips a
    collective on a group the caller is not in)."""
    out = [None] * len(leaders)
    dist.all_gather_object(out, stats, group=leaders_group)
    return out if dist.get_rank() in leaders else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-node", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    leaders = list(range(0, world, args.per_node))
    leaders_group = dist.new_group(leaders)
    stats = {"rank": rank, "seen": 10 * rank}
    got = collect_leader_stats(stats, leaders_group, leaders)
    if got is not None:
        print(got)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
