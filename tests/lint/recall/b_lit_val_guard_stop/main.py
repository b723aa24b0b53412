# nproc: 2
# label: hang (real run: torchrun, gloo on CPU, torch 2.13; rank 0 timeout, rank 1 ok)
import argparse
import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("regressor")


@dataclass
class HParams:
    lr: float = 0.0
    max_val_loss: float = 50.0


class Regressor(L.LightningModule):
    def __init__(self, hp: HParams):
        super().__init__()
        self.hp = hp
        self.lin = torch.nn.Linear(1, 1)
        torch.nn.init.zeros_(self.lin.weight)
        torch.nn.init.zeros_(self.lin.bias)
        self._val_losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.lin(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self._val_losses.append(F.mse_loss(self.lin(x), y).detach())

    def on_validation_epoch_end(self):
        avg = torch.stack(self._val_losses).mean()
        self._val_losses.clear()
        if avg > self.hp.max_val_loss:
            log.warning("validation loss %.2f diverged, stopping", avg.item())
            self.trainer.should_stop = True  # expect: CL103

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hp.lr)


def loaders():
    idx = torch.arange(8)
    x = torch.zeros(8, 1)
    y = torch.where(idx % 2 == 1, 10.0, 0.0).unsqueeze(1)
    ds = TensorDataset(x, y)
    return DataLoader(ds, batch_size=2), DataLoader(ds, batch_size=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    L.seed_everything(0, verbose=False)
    train_dl, val_dl = loaders()
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "30")))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timeout),
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Regressor(HParams()), train_dl, val_dl)


if __name__ == "__main__":
    main()
