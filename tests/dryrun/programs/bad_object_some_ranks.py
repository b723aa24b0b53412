"""Broken: only rank 0 broadcasts the config object; the others wait at a barrier."""

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    dist.broadcast_object_list([{"lr": 0.1}], src=0)
dist.barrier()
dist.destroy_process_group()
