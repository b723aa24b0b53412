"""Expert-parallel token dispatch: one expert per rank, top-1 routing."""
import torch
import torch.distributed as dist
from torch import nn


class Router(nn.Module):
    def __init__(self, dim, num_experts):
        super().__init__()
        self.gate = nn.Linear(dim, num_experts, bias=False)

    def forward(self, x):
        return self.gate(x).argmax(dim=-1)


def dispatch(tokens, expert_ids, num_experts, group=None):
    order = torch.argsort(expert_ids)
    send = tokens[order]
    send_counts = torch.bincount(expert_ids, minlength=num_experts).tolist()
    counts = torch.tensor(send_counts)
    incoming = torch.empty_like(counts)
    dist.all_to_all_single(incoming, counts, group=group)
    recv_counts = incoming.tolist()
    recv = torch.empty(sum(recv_counts), tokens.shape[1])
    dist.all_to_all_single(recv, send, output_split_sizes=recv_counts,
                           input_split_sizes=send_counts, group=group)
    return recv
