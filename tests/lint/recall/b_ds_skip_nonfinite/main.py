# nproc: 2
# label: hang (by reading deepspeed 0.16.4's source: not installed here)
# label by reading deepspeed 0.16.4 (not installed here): DeepSpeedEngine.backward calls
# allreduce_gradients() at every gradient-accumulation boundary (engine.py:2150), so a rank that
# skips backward leaves the others in that all-reduce.
import argparse
import json
import logging
import math

import deepspeed
import torch
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("ds_train")

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)


class Runner:
    def __init__(self, args):
        self.args = args
        model = Net()
        self.model_engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=DS_CONFIG
        )

    def train_epoch(self, loader):
        for step, (x, y) in enumerate(loader):
            pred = self.model_engine(x)
            loss = torch.nn.functional.mse_loss(pred, y)
            if not math.isfinite(loss.item()):
                log.warning("step %d: non-finite loss, skipping", step)
                continue  # expect: CL103
            self.model_engine.backward(loss)
            self.model_engine.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--local_rank", type=int, default=-1)
    args = ap.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    data = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    runner = Runner(args)
    loader = DataLoader(data, batch_size=4)
    for _ in range(args.epochs):
        runner.train_epoch(loader)
    log.info(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
