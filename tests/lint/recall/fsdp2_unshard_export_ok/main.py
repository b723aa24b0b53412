"""Train with FSDP2, then export the full weights from the main process.
Real run (torchrun, 2 processes, gloo, CPU): ok: every rank returned."""
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def is_main_process():
    return dist.get_rank() == 0


class Exporter:
    def __init__(self, out_dir):
        self.out_dir = out_dir

    def export(self, model):
        weights = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
        if is_main_process():
            torch.save(weights, os.path.join(self.out_dir, "model.pt"))


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    fully_shard(model, reshard_after_forward=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    Exporter(tempfile.mkdtemp()).export(model)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
