# Reduced from https://github.com/talmolab/sleap-nn/pull/471
# Cause: a stop command reaches rank 0 only; a barrier lines the ranks up in time but does not
# share `should_stop`, so rank 0 leaves the training loop and the others wait in the next
# step's gradient all-reduce.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class Trainer:
    def __init__(self) -> None:
        self.should_stop = False
        self.global_step = 0


def poll_controller(trainer: Trainer) -> None:
    # the ZMQ socket lives on the global-zero process only
    if dist.get_rank() == 0 and trainer.global_step == 3:
        trainer.should_stop = True


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
        dist.barrier()
        if trainer.should_stop:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
