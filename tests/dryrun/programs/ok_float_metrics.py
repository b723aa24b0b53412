"""A DDP loop that turns its loss and gradient norm into Python numbers with float() and
int() for logging, metrics and a learning-rate scale: no outcome depends on them, so the
dry-run needs no value (and no real compute)."""

import logging

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("train")


def scaled(value: float, factor: float) -> float:
    return value * factor


def main() -> list:
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    metrics = {}
    for step in range(3):
        loss = model(torch.randn(8, 64)).square().mean()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        history.append(float(loss))
        metrics["loss"] = scaled(float(loss), 2.0)
        metrics["tokens"] = int(loss.new_ones(()).sum()) * 8
        for p in model.parameters():
            p.data.mul_(1 - 0.01 * float(norm))
        log.info("step %d loss %.4f", step, float(loss))
        print(f"step {step} loss {float(loss):.4f} norm {float(norm):.2f}")
    dist.barrier()
    return [("loss", float(loss)), ("history", history), ("metrics", metrics)]


if __name__ == "__main__":
    print(main())
    dist.destroy_process_group()
