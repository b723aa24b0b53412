# Reduced from https://github.com/pytorch/pytorch/issues/25390
# Fix (maintainer's answer): every process calls new_group once per pair, for all pairs in
# the same order, and keeps the one it belongs to.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    world = dist.get_world_size()
    g = torch.Generator().manual_seed(1234)
    perm = torch.randperm(world, generator=g).tolist()
    mine = None
    for start in range(0, world, 2):
        pair = sorted(perm[start : start + 2])
        pg = dist.new_group(pair, timeout=timeout)
        if rank in pair:
            mine = pg
    t = torch.ones(4) * rank
    dist.all_reduce(t, group=mine)
    print(rank, t.tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
