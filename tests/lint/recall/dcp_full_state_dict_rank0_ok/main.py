"""FSDP2 fine-tuning that writes a consolidated (full) state dict at the end.
Real run (torchrun, 2 processes, gloo, CPU): ok: every rank returned."""
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard


class Classifier(nn.Module):
    def __init__(self, d_in=20, d_hidden=32, n_cls=4):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU())
        self.cls = nn.Linear(d_hidden, n_cls)

    def forward(self, x):
        return self.cls(self.enc(x))


def save_consolidated(model, path):
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    sd = get_model_state_dict(model, options=options)
    if dist.get_rank() == 0:
        torch.save(sd, path)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    torch.manual_seed(0)
    model = Classifier()
    fully_shard(model.enc)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for _ in range(3):
        x, y = torch.randn(16, 20), torch.randint(0, 4, (16,))
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    save_consolidated(model, os.path.join(tempfile.mkdtemp(), "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
