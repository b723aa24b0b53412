# Reduced from https://github.com/dvl-tum/center-group/pull/2
# Fix: logging that only rank 0 does passes rank_zero_only=True, which skips the sync.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Module:
    def __init__(self) -> None:
        self.world_rank = dist.get_rank()
        self.logged: dict[str, float] = {}

    def log(self, name: str, value: torch.Tensor, sync_dist: bool = True, rank_zero_only: bool = False) -> None:
        if sync_dist and not rank_zero_only:
            value = value.clone()
            dist.all_reduce(value)
            value /= dist.get_world_size()
        self.logged[name] = float(value)

    def validation_epoch_end(self, outputs: list[torch.Tensor]) -> None:
        ap = torch.stack(outputs).mean()
        if self.world_rank == 0:
            self.log("val/AP", ap, sync_dist=True, rank_zero_only=True)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    module = Module()
    for epoch in range(2):
        grad = torch.ones(4)
        dist.all_reduce(grad)
        module.validation_epoch_end([torch.tensor(0.5 + 0.1 * epoch), torch.tensor(0.6)])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
