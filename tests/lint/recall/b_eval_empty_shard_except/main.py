# nproc: 4
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 peer_closed, rank 1 timeout, rank 2 timeout, rank 3 timeout)
import argparse
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from metrics import global_mean, mean_accuracy

log = logging.getLogger("eval")

VALIDATION_FILES = ["val-000.jsonl", "val-001.jsonl", "val-002.jsonl"]


def shard(items, rank, world):
    return items[rank::world]


def run_eval(model, files, rank, world):
    preds, labels = [], []
    for name in shard(files, rank, world):
        x = torch.full((1, 4), float(len(name)))
        preds.append(int(model(x).argmax()))
        labels.append(0)
    try:
        acc = mean_accuracy(preds, labels)
        acc = global_mean(acc)  # expect: CL115
    except ZeroDivisionError:
        log.warning("rank %d: no validation files", rank)
        acc = float("nan")
    return acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    torch.manual_seed(args.seed)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(4, 2)
    acc = run_eval(model, VALIDATION_FILES, rank, world)
    log.info("acc %.3f", acc)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
