"""A tiny classifier as a LightningModule."""
from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F


@dataclass
class ModelConfig:
    hidden: int = 8
    lr: float = 0.05
    positive_budget: int = 2  # stop the epoch after this many batches


class BudgetedClassifier(L.LightningModule):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.net = torch.nn.Sequential(torch.nn.Linear(1, cfg.hidden), torch.nn.ReLU(), torch.nn.Linear(cfg.hidden, 2))
        self.positives_seen = 0

    def on_train_epoch_start(self):
        self.positives_seen = 0

    def on_train_batch_start(self, batch, batch_idx):
        if batch_idx >= self.cfg.positive_budget:
            return -1
        return None

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.positives_seen += int(y.sum())
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.cfg.lr)
