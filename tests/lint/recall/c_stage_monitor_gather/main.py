# nproc: 2
# report: https://github.com/bo-ke/llm-internal-medicine/pull/45 (gather_and_aggregate returned early on a pipeline stage holding no monitored layer: all_gather_object hang)
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 waits in all_gather_object until rank 1, which skipped it, exits)
import argparse
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from monitor import LayerMonitor


@dataclass
class ModelConfig:
    n_layers: int = 6
    hidden: int = 8
    watch_layers: list = field(default_factory=lambda: [0, 1, 2])


def layers_for_stage(n_layers, stage, n_stages):
    per = n_layers // n_stages
    return list(range(stage * per, (stage + 1) * per))


class StageModel(torch.nn.Module):
    def __init__(self, cfg, layer_ids):
        super().__init__()
        self.layer_ids = layer_ids
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(cfg.hidden, cfg.hidden) for _ in layer_ids)

    def forward(self, x, monitor):
        for lid, blk in zip(self.layer_ids, self.blocks):
            x = torch.tanh(blk(x))
            monitor.record(lid, x)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "15"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = ModelConfig()
    layer_ids = layers_for_stage(cfg.n_layers, rank, world)
    model = StageModel(cfg, layer_ids)
    monitor = LayerMonitor(layer_ids, cfg.watch_layers)
    for step in range(args.steps):
        x = torch.randn(4, cfg.hidden)
        with torch.no_grad():
            model(x, monitor)
        summary = monitor.gather_and_aggregate()  # expect: CL115
        if rank == 0:
            print(step, sorted(summary))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
