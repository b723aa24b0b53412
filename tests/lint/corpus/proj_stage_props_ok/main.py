"""Two pipeline stages. Run: torchrun --nproc-per-node 2 main.py"""
import torch
import torch.distributed as dist

from link import Neighbours

SHAPE = (1024, 1024)


def run(link, chunks):
    if link.head:
        for c in chunks:
            link.push(c)
            link.pull_back(SHAPE)
    else:
        for _c in chunks:
            link.pull(SHAPE)
            link.push_back(torch.zeros(SHAPE))


def main():
    dist.init_process_group("gloo")
    link = Neighbours(dist.get_rank(), dist.get_world_size())
    run(link, [torch.randn(SHAPE) for _ in range(2)])


if __name__ == "__main__":
    main()
