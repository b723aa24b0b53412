"""Audio clips split into contiguous per-rank chunks of a fixed-size list: 22 clips over two
ranks in batches of 4 give rank 0 three batches (11 clips) and rank 1 three — but over four
ranks 6, 6, 6, 4 clips: two batches each except the last rank, which has one."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset, TensorDataset


def clip_bank(count=22, frames=80):
    return TensorDataset(torch.randn(count, frames), torch.zeros(count, dtype=torch.long))


def my_chunk(total, me, world):
    size = -(-total // world)
    lo = min(me * size, total)
    return range(lo, min(lo + size, total))


def main():
    dist.init_process_group("gloo")
    me, world = dist.get_rank(), dist.get_world_size()
    bank = clip_bank()
    batches = DataLoader(Subset(bank, list(my_chunk(len(bank), me, world))), batch_size=4)
    weights = torch.zeros(80)
    for clips, _labels in batches:
        grad = clips.mean(0)
        dist.all_reduce(grad)  # expect: CL115
        weights -= grad
    dist.barrier()


if __name__ == "__main__":
    main()
