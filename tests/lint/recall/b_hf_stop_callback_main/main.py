# nproc: 2
# label: hang (real run: torchrun, gloo on CPU, torch 2.13, transformers 5.24; both ranks still waiting at the 400 s outer limit, while the correct twin finishes in 100 s)
import argparse
import os
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from callbacks import StepBudgetCallback


class ToyDataset(Dataset):
    def __init__(self, n: int = 64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = (self.x.sum(-1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"features": self.x[i], "labels": self.y[i]}


class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)

    def forward(self, features, labels=None):
        logits = self.net(features)
        loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=8)
    args = ap.parse_args()
    targs = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=4,
        max_steps=args.max_steps,
        learning_rate=0.01,
        use_cpu=True,
        ddp_backend="gloo",
        ddp_timeout=int(float(os.environ.get("CASE_TIMEOUT_S", "30"))),
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
    )
    trainer = Trainer(
        model=ToyModel(),
        args=targs,
        train_dataset=ToyDataset(),
        callbacks=[StepBudgetCallback(args.budget)],
    )
    trainer.train()


if __name__ == "__main__":
    main()
