"""Gradient accumulation over micro-batches of one batch."""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

IGNORE = -100


def split_micro(batch: dict, n: int) -> list[dict]:
    size = batch["labels"].shape[0] // n
    return [{k: v[i * size : (i + 1) * size] for k, v in batch.items()} for i in range(n)]


def accumulate_step(accelerator, model, optimizer, batch: dict, micro: int) -> float:
    parts = split_micro(batch, micro)
    total = 0.0
    for i, mb in enumerate(parts):
        empty = (mb["labels"] != IGNORE).sum() == 0
        last = i == len(parts) - 1
        ctx = contextlib.nullcontext() if last else accelerator.no_sync(model)
        with ctx:
            logits = model(mb["features"])
            if empty:
                loss = logits.sum() * 0.0  # keeps every rank in the gradient reduction
            else:
                loss = F.cross_entropy(logits, mb["labels"], ignore_index=IGNORE)
            accelerator.backward(loss / micro)
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad()
    return total
