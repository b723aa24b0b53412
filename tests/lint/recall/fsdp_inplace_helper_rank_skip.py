import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self, d=16, n=4):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def apply_fsdp(model):
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)


def train_epoch(model, batches, opt, rank):
    for step, (x, y) in enumerate(batches):
        if rank == 0 and step == 3:
            continue  # expect: CL103
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = Net()
    apply_fsdp(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(4, 16), torch.randn(4, 16)) for _ in range(6)]
    train_epoch(model, batches, opt, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
