"""Tensor-parallel pairs. Run: torchrun --nproc-per-node 4 main.py"""
import torch.distributed as dist

from tp_layers import SharedTable


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = None
    for start in range(0, world, 2):
        g = dist.new_group(list(range(start, start + 2)))
        if rank in (start, start + 1):
            mine = g
    SharedTable(128, 16, mine)
    dist.barrier()


if __name__ == "__main__":
    main()
