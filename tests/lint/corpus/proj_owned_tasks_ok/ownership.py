import torch
import torch.distributed as dist


def owned(n_tasks, rank, world):
    return [t for t in range(n_tasks) if t % world == rank]


class TaskBank:
    def __init__(self, n_tasks):
        self.me = dist.get_rank()
        self.tasks = owned(n_tasks, self.me, dist.get_world_size())

    def norms(self):
        out = []
        for _t in self.tasks:
            sq = torch.ones(1)
            dist.all_reduce(sq)
            out.append(sq)
        return out
