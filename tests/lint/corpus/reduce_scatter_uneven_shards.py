"""Gradient shards sized from the rank: reduce_scatter_tensor needs the same chunk on every
rank."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    chunk = 16 + rank
    grads = torch.ones(chunk * world)
    mine = torch.empty(chunk)
    dist.reduce_scatter_tensor(mine, grads)  # expect: CL116


if __name__ == "__main__":
    main()
