"""Two of the ranks score a held-out split on their own group; every rank, scorer or not,
averages the gradients over the whole job (no `group=`: it is meant for every rank)."""

import torch
import torch.distributed as dist

SCORERS = (0, 1)


def main():
    dist.init_process_group("gloo")
    me = dist.get_rank()
    scorers = dist.new_group(list(SCORERS))
    grads = torch.ones(8)
    for _ in range(3):
        dist.all_reduce(grads)
        grads /= dist.get_world_size()
    if me in SCORERS:
        score = torch.zeros(1)
        dist.all_reduce(score, group=scorers)
    dist.barrier()


if __name__ == "__main__":
    main()
