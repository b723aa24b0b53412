# nproc: 4
# label: fail (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 timeout, rank 2 error, rank 3 error)
import argparse
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from eval_utils import EvalResult, NodeEvaluator

logging.basicConfig(level=logging.WARNING)


def build_loader(rank: int, world: int, n: int = 32):
    data = torch.arange(n, dtype=torch.float32).view(-1, 2)
    return [data[i] for i in range(rank, len(data), world)]


def evaluate(model, loader) -> EvalResult:
    res = EvalResult()
    with torch.no_grad():
        for x in loader:
            pred = model(x).argmax().item()
            res.correct += int(pred == 0)
            res.total += 1
            res.samples.append(pred)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus-per-node", type=int, default=2)
    args = ap.parse_args()
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(2, 3)
    evaluator = NodeEvaluator(args.gpus_per_node)
    res = evaluate(model, build_loader(rank, world))
    evaluator.collect(res)  # expect: CL116
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
