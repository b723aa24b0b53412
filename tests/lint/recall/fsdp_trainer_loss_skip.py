import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def make_model(d=8):
    model = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU(), torch.nn.Linear(d, d))
    return fully_shard(model)


class Trainer:
    def __init__(self, model, lr=0.1):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=lr)

    def fit(self, data):
        for x, y in data:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            if loss.item() > 10.0:
                continue  # expect: CL103
            loss.backward()
            self.opt.step()


def main():
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(dist.get_rank())
    data = [(torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g)) for _ in range(4)]
    trainer = Trainer(make_model())
    trainer.fit(data)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
