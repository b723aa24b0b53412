# Reduced from https://github.com/bo-ke/llm-internal-medicine/pull/45
# Fix: the early return is dropped, so every rank enters the gather even with no metrics.
import os
from datetime import timedelta

import torch.distributed as dist


class MetricMonitor:
    def __init__(self, layers: list[str]) -> None:
        self.metrics = {name: 0.0 for name in layers}

    def record(self, step: int) -> None:
        for name in self.metrics:
            self.metrics[name] = step * 0.5

    def gather_and_aggregate(self) -> dict:
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, self.metrics)
        merged: dict = {}
        for part in parts:
            merged.update(part)
        return merged


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    stage_layers = {0: ["layers.0", "layers.1"], 1: []}[rank]
    monitor = MetricMonitor(stage_layers)
    for step in range(3):
        monitor.record(step)
        merged = monitor.gather_and_aggregate()
        if rank == 0:
            print(step, merged)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
