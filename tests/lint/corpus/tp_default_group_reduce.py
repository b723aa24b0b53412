"""A row-parallel linear layer that forgets its group."""

import torch
import torch.distributed as dist


class RowParallelLinear(torch.nn.Module):
    def __init__(self, in_features, out_features, tp_ranks):
        super().__init__()
        self.tp_group = dist.new_group(tp_ranks)
        tp = len(tp_ranks)
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features // tp))

    def forward(self, x):
        partial = torch.nn.functional.linear(x, self.weight)
        dist.all_reduce(partial)  # expect: CL105
        return partial
