"""Broken: the last rank has no data and returns early; the others still all-reduce."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == world - 1:
        return
    for _ in range(2):
        dist.all_reduce(torch.ones(4))


main()
