"""Workers exit after training; rank 0 then waits for them in a barrier."""

import sys

import torch.distributed as dist


def finish(rank, model, path):
    if rank != 0:
        sys.exit(0)  # expect: CL103
    model.save(path)
    dist.barrier()
