# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/16541
# Fix: self.all_gather runs on every rank; only the printing stays on global zero.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Module:
    def __init__(self) -> None:
        self.fc = torch.nn.Linear(5, 1)

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(out, t)
        return torch.stack(out)

    def test_step(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.fc(x)

    def test_epoch_end(self, outputs: list[torch.Tensor], is_global_zero: bool) -> None:
        gathered = self.all_gather(torch.cat(outputs))
        if is_global_zero:
            print("after gather, len =", len(gathered))


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    torch.manual_seed(0)
    module = Module()
    x = torch.rand(10, 5)
    outputs = [module.test_step(b) for b in x.split(5)]
    module.test_epoch_end(outputs, is_global_zero=dist.get_rank() == 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
