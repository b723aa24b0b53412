import torch
import torch.distributed as dist


class TorchCollective:
    def scatter(self, t):
        dist.scatter(t, src=0)


def denoise(x, done):
    # torch.scatter is torch's tensor op, not TorchCollective.scatter: no collective here
    for _ in range(10):
        x = torch.scatter(x, 0, torch.zeros_like(x, dtype=torch.long), x)
        if torch.all(done):
            break
    return x
