"""Broadcasting from the group leader, passing its group rank as a global `src`."""

import torch.distributed as dist


def sync_buffers(module, group):
    leader = dist.get_rank(group)
    for buf in module.buffers():
        dist.broadcast(buf, src=leader, group=group)  # expect: CL106
