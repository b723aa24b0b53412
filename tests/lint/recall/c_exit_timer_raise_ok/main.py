# nproc: 2
# report: https://github.com/isi-nlp/rtg/issues/11 (the ranks' barrier/collective calls fall out of step when one rank leaves a step early)
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; both ranks ok)
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from timing import StepTimer

# (sample id, label) pairs; label -1 marks a corrupt record
RECORDS = [(0, 1), (1, 0), (2, 1), (3, 0), (4, 1), (5, -1), (6, 0), (7, 1)]


class CorruptRecord(ValueError):
    pass


def decode(record):
    sid, label = record
    if label < 0:
        raise CorruptRecord(f"record {sid} has no label")
    return torch.full((4,), float(sid)), torch.tensor([float(label)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "15"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = RECORDS[rank::world]
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    log, skipped = [], 0
    for i, rec in enumerate(mine):
        try:
            with StepTimer(f"step{i}", log):
                x, y = decode(rec)
                loss = torch.nn.functional.mse_loss(model(x), y.expand(1))
                opt.zero_grad()
                loss.backward()
                opt.step()
        except CorruptRecord:
            skipped += 1
    if rank == 0:
        print(log)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
