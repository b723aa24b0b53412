"""A timing context manager whose __exit__ all-reduces the elapsed time: entered on rank 0
only, its collective pairs with the other ranks' barrier."""

import time

import torch
import torch.distributed as dist


class StepTimer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        took = torch.tensor([time.perf_counter() - self.start])
        dist.all_reduce(took, op=dist.ReduceOp.MAX)  # expect: CL115
        return False


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        with StepTimer():
            torch.randn(64, 64).sum()
    dist.barrier()


if __name__ == "__main__":
    main()
