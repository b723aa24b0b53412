"""Correct: a DDP step whose loss keeps only some tokens (a boolean mask, `nonzero`,
`unique`, `bincount`: sizes that depend on the data). The sizes stay inside each rank's own
compute; what is communicated (the gradient buckets, the summed loss) has the same size on
every rank."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for step in range(3):
    x = torch.randn(64, 32, generator=gen)
    labels = torch.randint(-1, 8, (64,), generator=gen)  # -1: padding
    logits = model(x)
    keep = (labels >= 0).nonzero().squeeze(1)  # how many: the data's
    loss = torch.nn.functional.cross_entropy(logits[keep], labels[keep])
    seen = torch.bincount(labels[keep], minlength=8)
    classes = torch.unique(labels[keep])
    loss = loss + 0.0 * logits[logits > 3].sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    total = loss.detach().reshape(1)
    dist.all_reduce(total)
    print(f"step {step} loss {float(total):.3f} classes {classes.numel()} seen {seen.sum()}")
dist.destroy_process_group()
