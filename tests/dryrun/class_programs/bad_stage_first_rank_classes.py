"""Four pipeline stages of 16 ranks (`rank // 16`); the first rank of stage 2 alone issues an
extra barrier on its stage's group. Rank classes record a few ranks per stage and derive the
rest; the extra barrier is found on rank 32 (a rank of its own class)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
world = dist.get_world_size()
per_stage = world // 4
stage = rank // per_stage
groups = [dist.new_group(list(range(s * per_stage, (s + 1) * per_stage))) for s in range(4)]
mine = groups[stage]
x = torch.zeros(1024)
dist.all_reduce(x, group=mine)
if stage > 0:
    dist.recv(x, src=rank - per_stage)
if stage < 3:
    dist.send(x, dst=rank + per_stage)
if rank % per_stage == 0 and stage == 2:
    dist.barrier(group=mine)  # the bug: only the first rank of stage 2
dist.all_reduce(x, group=mine)
dist.destroy_process_group()
