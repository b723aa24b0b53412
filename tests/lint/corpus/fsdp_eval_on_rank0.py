"""FSDP: generating samples on rank 0 only runs the sharded forward there."""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def sample(model, prompt, rank):
    model = FSDP(model)
    model.eval()
    if rank == 0:
        with torch.no_grad():
            out = model(prompt)  # expect: CL101
        print(out.argmax(-1))
    dist.barrier()
