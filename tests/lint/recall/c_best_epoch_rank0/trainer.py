"""A small Trainer: data-parallel training with gradient all-reduce, an averaged validation
loss, checkpointing of the best model and early stopping."""
import math
import os
import tempfile

import torch
import torch.distributed as dist


class Trainer:
    def __init__(self, model, opt, cfg):
        self.model = model
        self.opt = opt
        self.cfg = cfg
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.best_val = math.inf
        self.best_epoch = 0
        g = torch.Generator().manual_seed(1234 + self.rank)
        self.x = torch.randn(32, 4, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)

    def train_epoch(self):
        for i in range(0, len(self.x), self.cfg.batch_size):
            xb, yb = self.x[i : i + self.cfg.batch_size], self.y[i : i + self.cfg.batch_size]
            loss = torch.nn.functional.mse_loss(self.model(xb), yb)
            self.opt.zero_grad()
            loss.backward()
            for p in self.model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= self.world
            self.opt.step()

    @torch.no_grad()
    def validate(self):
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y).reshape(1)
        dist.all_reduce(loss)
        return float(loss) / self.world

    def save(self, epoch):
        torch.save(self.model.state_dict(), os.path.join(tempfile.gettempdir(), f"best_{os.getpid()}.pt"))

    def fit(self):
        for epoch in range(self.cfg.max_epochs):
            self.train_epoch()
            val = self.validate()
            if self.rank == 0 and val < self.best_val:
                self.best_val = val
                self.best_epoch = epoch
                self.save(epoch)
            if epoch - self.best_epoch >= self.cfg.early_stop_after:
                print(f"rank {self.rank}: no improvement for {self.cfg.early_stop_after} epochs, stopping")
                break  # expect: CL103
