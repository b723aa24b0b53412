"""A training loop on torchtitan's utilities: the loss is averaged over the data-parallel
mesh (an all-reduce) on rank zero only, where it is logged."""

import torch.distributed as dist
from torchtitan.distributed import utils as dist_utils


def train(model, opt, batches, dp_mesh):
    for batch in batches:
        loss = model(batch).pow(2).mean()
        loss.backward()
        dist_utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        opt.zero_grad()
        if dist.get_rank() == 0:
            mean = dist_utils.dist_mean(loss.detach(), dp_mesh)  # expect: CL101
            print(f"loss {mean:.3f}")
