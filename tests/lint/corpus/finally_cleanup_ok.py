"""Process-group lifecycle with cleanup in `finally`."""

import os

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    try:
        t = torch.ones(4) * int(os.environ["RANK"])
        dist.all_reduce(t)
        print(t)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
