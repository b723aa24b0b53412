"""Top-1 mixture-of-experts layer with one expert per rank.
Real run (torchrun, 2 processes, gloo, CPU): failed (gloo: received data size does not match)."""
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from moe import Router, dispatch

log = logging.getLogger("moe")


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    router = Router(16, world)
    expert = torch.nn.Linear(16, 16)
    batches = torch.Generator().manual_seed(100 + rank)
    for step in range(3):
        tokens = torch.randn(24, 16, generator=batches)
        recv = dispatch(tokens, router(tokens), world)  # expect: CL116
        out = expert(recv)
        log.info("rank %d step %d processed %d tokens", rank, step, out.shape[0])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
