"""Tensor-parallel pairs: every rank is in one pair, and the activation reduction meant for
the pair forgot its `group=` (it reduces over the whole job)."""

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    me, world = dist.get_rank(), dist.get_world_size()
    mine = None
    for first in range(0, world, 2):
        pair = dist.new_group([first, first + 1])
        if me in (first, first + 1):
            mine = pair
    act = torch.ones(4)
    dist.all_reduce(act)  # expect: CL105
    dist.broadcast(act, src=me - me % 2, group=mine)


if __name__ == "__main__":
    main()
