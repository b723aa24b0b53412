# nproc: 2
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 timeout)
import argparse
import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

log = logging.getLogger("shards")

CORPUS = [f"doc-{i:03d}" for i in range(7)]


@dataclass
class LoopConfig:
    steps: int = 10
    dim: int = 4
    docs: list = field(default_factory=lambda: list(CORPUS))


def contiguous_shard(items, rank, world):
    per = (len(items) + world - 1) // world
    return items[rank * per : (rank + 1) * per]


def train(cfg: LoopConfig, rank: int, world: int) -> int:
    stream = iter(contiguous_shard(cfg.docs, rank, world))
    weight = torch.zeros(cfg.dim)
    done = 0
    for _ in range(cfg.steps):
        try:
            doc = next(stream)
        except StopIteration:
            break  # expect: CL103
        grad = torch.full((cfg.dim,), float(len(doc)))
        dist.all_reduce(grad)
        weight -= 0.01 * grad / world
        done += 1
    return done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    n = train(LoopConfig(steps=args.steps), dist.get_rank(), dist.get_world_size())
    log.info("trained on %d docs", n)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
