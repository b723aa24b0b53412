"""Clean: every rank seeds alike, builds the same model and feeds it the same batch, then tests
its loss to decide an extra all_reduce. The loss is the same number on every rank, so every
rank takes the same branch. Past the real re-run budget (the loss is not computed), the
dry-run sees that every rank made the number alike (same seed, same data, same operations)
and does not report the test as rank-local."""

import copy

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
block = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
# layers cloned from one block (as nn.TransformerEncoder does): copies hold what it holds
model = torch.nn.Sequential(block, copy.deepcopy(block), torch.nn.Linear(64, 1))
data = torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64) / 8192
loss = model(data).pow(2).mean()
loss.backward()
torch.optim.SGD(model.parameters(), lr=0.1).step()
again = model(data).pow(2).mean()
if again.item() > 0.0:  # the same on every rank: every rank all-reduces
    dist.all_reduce(torch.ones(2))
dist.barrier()
dist.destroy_process_group()
