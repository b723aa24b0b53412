# Reduced from https://github.com/pytorch/pytorch/issues/44957
# Fix (the reporter's resolution): the synchronised sub-model is always called; on the first
# frame it gets a uniform input instead of being skipped.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class SyncNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = torch.stack([x.mean(0), x.pow(2).mean(0)])
        dist.all_reduce(stats)
        stats /= dist.get_world_size()
        mean, sq = stats
        return (x - mean) / (sq - mean.pow(2) + 1e-5).sqrt()


class VideoModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model_a = torch.nn.Linear(6, 6)
        self.model_b = torch.nn.Sequential(torch.nn.Linear(6, 6), SyncNorm())
        self.iter = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stuff = self.model_a(x)
        if self.iter == 0:
            stuff = torch.full_like(stuff, 1.0 / stuff.shape[1])  # uniform distribution
        stuff = self.model_b(stuff)
        self.iter += 1
        return stuff


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    model = VideoModel()
    model.iter = 3 * rank
    for _ in range(3):
        with torch.no_grad():
            model(torch.randn(4, 6))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
