# nproc: 4
# label: fail (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 timeout, rank 2 error, rank 3 error)
import argparse
import json
import os
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

import parallel


@dataclass
class ShardingPlan:
    vocab_start: int = 0
    vocab_end: int = 0
    seed: int = 0


def plan_shards(vocab: int, tp_rank: int, tp_size: int) -> ShardingPlan:
    per = vocab // tp_size
    return ShardingPlan(per * tp_rank, per * (tp_rank + 1), seed=1234)


def sync_plan(plan: ShardingPlan) -> ShardingPlan:
    payload = [asdict(plan)]
    dist.broadcast_object_list(payload, src=0, group=parallel.get_tp_group())  # expect: CL116
    seed = payload[0]["seed"]
    return ShardingPlan(plan.vocab_start, plan.vocab_end, seed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=64)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30"))))
    parallel.initialize_tensor_parallel(args.tp)
    tp_rank = dist.get_rank(parallel.get_tp_group())
    plan = sync_plan(plan_shards(args.vocab, tp_rank, args.tp))
    torch.manual_seed(plan.seed)
    emb = torch.randn(plan.vocab_end - plan.vocab_start, 4)
    dist.all_reduce(emb.sum(), group=parallel.get_tp_group())
    print(json.dumps(asdict(plan)))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
