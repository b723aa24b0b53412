"""Hangs: each rank puts its own loss into a small tensor (`torch.tensor([loss.item()])`, as a
logging helper does) and tests that tensor: rank 0's loss is above zero and rank 1's is not,
so rank 0 waits in a barrier rank 1 never enters. The dry-run once gave the small tensor the
number's placeholder as a value it knew, and took the test alike on both ranks: all clear."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(4 * rank)
model = torch.nn.Linear(64, 64)
loss = model(torch.randn(8, 64)).sum()
logged = torch.tensor([loss.item()])  # the rank's own
if logged.item() > 0:  # 7.04 on rank 0, -2.96 on rank 1
    dist.barrier()
dist.destroy_process_group()
