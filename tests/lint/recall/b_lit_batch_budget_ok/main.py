# nproc: 2
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; rank 0 ok, rank 1 ok)
import argparse
import os
from datetime import timedelta

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

from model import BudgetedClassifier, ModelConfig


def make_loader(n: int = 16, batch_size: int = 2) -> DataLoader:
    idx = torch.arange(n)
    x = idx.float().unsqueeze(1)
    y = (idx % 3 == 0).long()
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--budget", type=int, default=2)
    args = ap.parse_args()
    L.seed_everything(0, verbose=False)
    model = BudgetedClassifier(ModelConfig(positive_budget=args.budget))
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
    )
    trainer.fit(model, make_loader())


if __name__ == "__main__":
    main()
