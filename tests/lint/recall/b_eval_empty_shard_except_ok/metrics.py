"""Evaluation metrics."""
from __future__ import annotations

import torch
import torch.distributed as dist


def mean_accuracy(preds: list[int], labels: list[int]) -> float:
    hits = sum(int(p == y) for p, y in zip(preds, labels))
    return hits / len(preds)


def global_mean(value: float) -> float:
    t = torch.tensor([value])
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()
