"""Each rank's buffer size is looked up in a per-rank table (`sizes[rank]`): the rank is used
as an index, so its value leaves the tracking there and each rank is recorded on its own.
Rank 5's entry differs: its all_reduce has another size (CL204)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
sizes = [1024] * dist.get_world_size()
sizes[5] = 2048
x = torch.zeros(sizes[rank])
dist.all_reduce(x)  # sizes differ on rank 5
dist.destroy_process_group()
