"""Keep the best checkpoint (by validation loss) with asynchronous DCP saves.
Real run (torchrun, 2 processes, gloo, CPU): failed (a rank left while its peer waited on it).
At 8 ranks the 6 validation rows leave ranks 6 and 7 none: they divide by zero in validate()
while the others enter the checkpoint group's collective (the CL115 at the save)."""
import logging
import math
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

log = logging.getLogger("best")


class Trainer:
    def __init__(self, model, out_dir):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)
        self.out_dir = out_dir
        self.best = math.inf
        self.min_delta = 0.05
        self.pending = None
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        # checkpoint traffic gets its own group, off the training group
        self.ckpt_group = dist.new_group(backend="gloo")

    def train_epoch(self, data):
        for x, y in data:
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            for p in self.model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            self.opt.step()
            self.opt.zero_grad()

    @torch.no_grad()
    def validate(self, data):
        total = sum(nn.functional.mse_loss(self.model(x), y).item() for x, y in data)
        return total / len(data)

    def maybe_checkpoint(self, epoch, val_loss):
        if val_loss < self.best - self.min_delta:  # expect: CL102
            self.best = val_loss
            if self.pending is not None:
                self.pending.result()
            self.pending = dcp.async_save({"model": self.model.state_dict()},  # expect: CL115
                                          checkpoint_id=os.path.join(self.out_dir, f"best_{epoch}"),
                                          process_group=self.ckpt_group)

    def finish(self):
        if self.pending is not None:
            self.pending.result()


def split(n, rank, world, seed):
    g = torch.Generator().manual_seed(seed)
    rows = [(torch.randn(4, 6, generator=g), torch.randn(4, 1, generator=g)) for _ in range(n)]
    return rows[rank::world]


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    torch.manual_seed(0)
    trainer = Trainer(nn.Linear(6, 1), tempfile.mkdtemp())
    train = split(8, trainer.rank, trainer.world, seed=1)
    val = split(6, trainer.rank, trainer.world, seed=2)
    for epoch in range(8):
        trainer.train_epoch(train)
        val_loss = trainer.validate(val)
        trainer.maybe_checkpoint(epoch, val_loss)
    trainer.finish()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
