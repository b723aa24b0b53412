"""A learning-rate plateau tracker kept on each rank's own held-out score: the shard is drawn
from a generator seeded with the rank, so one rank may stop tuning while the others still
all-reduce their gradients."""

import torch
import torch.distributed as dist


class Plateau:
    def __init__(self, threshold=3):
        self.threshold = threshold
        self.worst = 0
        self.stalls = 0
        self.record = -1.0

    def observe(self, score):
        if score > self.record:
            self.record = score
            self.stalls = 0
        else:
            self.stalls += 1
            if self.stalls == self.threshold:
                return True
        return False


def heldout_score(weights, features):
    return torch.sigmoid(features @ weights).mean().item()


def tune(steps=40):
    dist.init_process_group("gloo")
    me = dist.get_rank()
    gen = torch.Generator().manual_seed(7 + me)
    features = torch.randn(128, 16, generator=gen)
    weights = torch.zeros(16, 1)
    plateau = Plateau()
    for _ in range(steps):
        grad = torch.randn(16, 1)
        dist.all_reduce(grad)
        weights -= 0.01 * grad
        if plateau.observe(heldout_score(weights, features)):  # expect: CL103
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    tune()
