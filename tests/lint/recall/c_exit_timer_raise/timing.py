"""Step timing: the slowest rank's time of each step, logged by rank 0."""
import time

import torch
import torch.distributed as dist


class StepTimer:
    def __init__(self, name, log):
        self.name = name
        self.log = log

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            return False  # let the caller see the error; no timing for a failed step
        t = torch.tensor([time.perf_counter() - self.t0])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            self.log.append((self.name, float(t)))
        return False
