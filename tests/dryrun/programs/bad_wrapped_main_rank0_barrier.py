"""Hangs: a barrier only rank 0 reaches each step, in a `main()` wrapped the way @hydra.main
wraps a job (`except Exception:` prints and exits 1). The data is split with random_split
(a permutation read back as a list of indices): where fake tensors stop at a value they did
not compute, the program's own handler catches the stop; the rank still must not end as if
the program had chosen to exit."""

import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset, random_split
from torch.utils.data.distributed import DistributedSampler


def main():
    global rank
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = TensorDataset(torch.randn(256, 4))
    train, _ = random_split(ds, [200, 56])
    dl = DataLoader(
        train,
        batch_size=32,
        sampler=DistributedSampler(train),
        num_workers=int(os.environ.get("NW", "0")),
    )
    t = torch.ones(1)
    for (_x,) in dl:
        dist.all_reduce(t)
        if rank == 0:
            dist.barrier()  # rank 0 only
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print("Error executing job:", repr(e), file=sys.stderr)
        sys.exit(1)
