"""Correct: pairs of ranks reduce inside their own subgroup; every rank creates every group."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pairs = [dist.new_group([r, r + 1]) for r in range(0, world, 2)]
mine = pairs[rank // 2]
dist.all_reduce(torch.ones(4), group=mine)
dist.broadcast(torch.ones(2), src=(rank // 2) * 2, group=mine)
dist.barrier()
dist.destroy_process_group()
