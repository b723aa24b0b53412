"""An error handler that synchronises before re-raising."""

import logging

import torch.distributed as dist

log = logging.getLogger(__name__)


def run_step(model, batch, optimizer):
    try:
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
    except RuntimeError:
        log.exception("step failed on rank %d", dist.get_rank())
        dist.barrier()  # expect: CL104
        raise
