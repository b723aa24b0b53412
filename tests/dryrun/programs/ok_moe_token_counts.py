"""Correct: an MoE router draws each token's expert, counts tokens per expert (`bincount`),
exchanges the counts with `all_to_all_single`, then sends the tokens with those splits."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
tokens = torch.randn(16, 8)
expert = torch.randint(0, world, (16,))
send_counts = torch.bincount(expert, minlength=world)
recv_counts = torch.empty_like(send_counts)
dist.all_to_all_single(recv_counts, send_counts)
order = torch.argsort(expert)
out = torch.empty(int(recv_counts.sum()), 8)
dist.all_to_all_single(out, tokens[order], recv_counts.tolist(), send_counts.tolist())
dist.destroy_process_group()
