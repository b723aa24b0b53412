# nproc: 2
# report: https://github.com/facebookresearch/fairseq/issues/810 (a worker hitting OOM skips its batch; the others hang in the gradient collective)
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; both ranks ok)
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from data import DocShard


class Worker:
    def __init__(self, args):
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.model = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.shard = DocShard(self.rank, self.world, args.max_len)
        self.skipped = 0

    def step(self, i):
        try:
            x = self.shard.batch(i)
            ok = torch.ones(1)
        except RuntimeError as e:
            if "out of memory" not in str(e):
                raise
            x, ok = None, torch.zeros(1)
        # every rank learns whether any rank ran out of memory; all skip together
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if ok.item() == 0:
            self.skipped += 1
            return
        loss = self.model(x).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad)
        self.opt.step()

    def run(self):
        for i in range(len(self.shard)):
            self.step(i)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-len", type=int, default=32)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "15"))))
    Worker(args).run()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
