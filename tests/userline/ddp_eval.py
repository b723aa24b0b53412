import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    correct = torch.zeros(1)
    with torch.no_grad():
        correct += model(torch.ones(2, 8)).sum()
    dist.all_reduce(correct)
    return correct.item()


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        loss = model(torch.randn(2, 8)).sum()
        loss.backward()
        opt.step()
        if dist.get_rank() == 0 and step == 1:
            evaluate(model)
    dist.destroy_process_group()


main()
