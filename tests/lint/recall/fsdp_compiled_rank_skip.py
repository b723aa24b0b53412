import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.lin(x))


def build(d=16, n=3):
    model = torch.nn.Sequential(*[Block(d) for _ in range(n)])
    for blk in model:
        fully_shard(blk)
    fully_shard(model)
    return model


def train(model, loader, opt):
    for x, y in loader:
        if dist.get_rank() == 0:
            continue  # expect: CL103
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def main():
    dist.init_process_group("gloo")
    model = torch.compile(build())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(dist.get_rank())
    data = [(torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)) for _ in range(8)]
    train(model, data, opt)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
