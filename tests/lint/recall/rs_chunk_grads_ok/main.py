"""Linear regression whose weight rows are sharded over the ranks (reduce-scatter of grads).
Real run (torchrun, 4 processes, gloo, CPU): ok: every rank returned."""
import argparse
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from sharded_sgd import RowShardedSGD

log = logging.getLogger("rs")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-features", type=int, default=12)
    ap.add_argument("--in-features", type=int, default=6)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    weight = torch.randn(args.out_features, args.in_features, requires_grad=True)
    opt = RowShardedSGD(weight, 0.1, rank, world)
    for step in range(args.steps):
        x = torch.randn(8, args.in_features)
        loss = (x @ weight.t()).pow(2).mean()
        loss.backward()
        shard = opt.step(weight.grad)
        log.info("rank %d step %d shard %s", rank, step, tuple(shard.shape))
        weight.grad = None
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
