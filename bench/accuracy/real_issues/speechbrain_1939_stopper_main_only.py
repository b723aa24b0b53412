# Reduced from https://github.com/speechbrain/speechbrain/issues/1939
# (discussed in https://github.com/speechbrain/speechbrain/pull/2051)
# Cause: the end-of-validation hook that feeds the epoch stopper runs on the main process
# only, so only rank 0 decides to skip the remaining epochs; the others keep training.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class EpochCounterWithStopper:
    def __init__(self, limit: int, limit_to_stop: int) -> None:
        self.current = 0
        self.limit = limit
        self.limit_to_stop = limit_to_stop
        self.best = float("inf")
        self.bad_epochs = 0

    def __iter__(self):
        while self.current < self.limit:
            self.current += 1
            yield self.current

    def should_stop(self, metric: float) -> bool:
        if metric < self.best - 1e-6:
            self.best = metric
            self.bad_epochs = 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.limit_to_stop


def train_epoch(params: torch.Tensor) -> None:
    for _ in range(3):
        grad = torch.full_like(params, 0.1)
        dist.all_reduce(grad)
        params -= grad


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    params = torch.zeros(4)
    counter = EpochCounterWithStopper(limit=6, limit_to_stop=2)
    valid_losses = [1.0, 0.9, 0.95, 0.97, 0.99, 1.0]
    for epoch in counter:
        train_epoch(params)
        # on_stage_end(VALID) is only called on the main process
        if dist.get_rank() == 0:
            if counter.should_stop(valid_losses[epoch - 1]):
                counter.current = counter.limit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
