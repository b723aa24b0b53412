# Reduced from https://github.com/talmolab/sleap-nn/pull/471
# Fix: the stop flag is reduced across ranks (reduce_boolean_decision, i.e. an all-reduce
# with MAX), so every rank sees rank 0's decision and they leave the loop together.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Trainer:
    def __init__(self) -> None:
        self.should_stop = False
        self.global_step = 0


def poll_controller(trainer: Trainer) -> None:
    if dist.get_rank() == 0 and trainer.global_step == 3:
        trainer.should_stop = True


def reduce_boolean_decision(decision: bool) -> bool:
    flag = torch.tensor(int(decision))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    trainer = Trainer()
    weights = torch.zeros(16)
    for _ in range(10):
        grad = torch.randn(16)
        dist.all_reduce(grad)
        weights -= 0.1 * grad
        trainer.global_step += 1
        poll_controller(trainer)
        trainer.should_stop = reduce_boolean_decision(trainer.should_stop)
        if trainer.should_stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
