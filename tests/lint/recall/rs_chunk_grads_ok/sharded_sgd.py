"""Sharded SGD: every rank owns a row block of the weight and reduce-scatters gradients."""
import torch
import torch.distributed as dist


class RowShardedSGD:
    def __init__(self, weight, lr, rank, world):
        self.weight = weight
        self.lr = lr
        self.rank = rank
        self.world = world
        rows = weight.shape[0]
        # torch.chunk: ceil(rows / world) rows per rank, the last ones get what is left
        self.my_rows = weight.detach().chunk(world, dim=0)[rank].shape[0]

    def step(self, grad):
        out = torch.empty(self.my_rows, grad.shape[1])
        dist.reduce_scatter_tensor(out, grad, op=dist.ReduceOp.SUM)
        return out
