# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/15860
# The pattern of the report: a rank-zero-only sampling routine calls the DDP-wrapped model
# (BatchNorm buffers, broadcast_buffers=True). With torch's DDP this does not hang: the buffer
# broadcast happens in the first forward after a training step only, so rank 0's broadcast in
# the no_grad sampling pairs with rank 1's in the next training forward, and rank 0 skips its
# own there. A checker that flags every DDP forward under a rank condition would be wrong here.
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0 and (epoch + 1) % 2 == 0:  # evaluate_sampling on rank zero
            model.eval()
            with torch.no_grad():
                samples = model(torch.randn(4, 8))
            model.train()
            print("sampled", samples.shape)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
