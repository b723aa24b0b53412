# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/18148
# Cause: trainer.log_dir broadcasts rank 0's directory to every rank (strategy.broadcast);
# reading it inside a @rank_zero_only hook makes rank 0 broadcast alone, and the broadcast
# then pairs with the first training step's all-reduce on the other rank.
import os
from datetime import timedelta
from functools import wraps

import torch
import torch.distributed as dist


def rank_zero_only(fn):
    @wraps(fn)
    def wrapped(*args, **kwargs):
        if dist.get_rank() == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped


class Trainer:
    def __init__(self) -> None:
        self._version = f"version_{os.getpid()}"

    @property
    def log_dir(self) -> str:
        obj = [os.path.join("lightning_logs", self._version)]
        dist.broadcast_object_list(obj, src=0)
        return obj[0]


class Model:
    @rank_zero_only
    def on_fit_start(self, trainer: Trainer) -> None:
        print("logging to", trainer.log_dir)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    trainer, model = Trainer(), Model()
    model.on_fit_start(trainer)
    for _ in range(3):
        grad = torch.randn(32)
        dist.all_reduce(grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
