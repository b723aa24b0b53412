"""Broken: the router sends the tokens with its own counts as both the input and the output
splits, without exchanging the counts: rank 0 waits for 12 tokens from rank 1, which sends 8."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
tokens = torch.randn(16, 8)
expert = (torch.arange(16) >= 4 + 4 * rank).long()  # rank 0: [4, 12], rank 1: [8, 8]
send_counts = torch.bincount(expert, minlength=world)
out = torch.empty(int(send_counts.sum()), 8)
dist.all_to_all_single(out, tokens, send_counts.tolist(), send_counts.tolist())
dist.destroy_process_group()
