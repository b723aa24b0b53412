# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/6430
# Cause: the train loop is wrapped in try/except that checkpoints on failure; when only one
# rank raises, that rank alone enters the checkpoint flow and its broadcast of the filename
# meets the other rank's training collectives instead.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def save_checkpoint_on_failure(epoch: int) -> None:
    name = [f"epoch={epoch}-failure.ckpt" if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(name, src=0)  # the checkpoint callback agrees on the filename
    print(dist.get_rank(), "saved", name[0])


def train(rank: int) -> None:
    for epoch in range(4):
        x = torch.randn(4)
        if rank == 1 and epoch == 2:
            raise ValueError("bad batch on rank 1")
        dist.all_reduce(x)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    try:
        train(dist.get_rank())
    except ValueError:
        save_checkpoint_on_failure(epoch=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
