# Reduced from https://github.com/Lightning-AI/pytorch-lightning/issues/7773
# Fix (Lightning PR #12630): gather the sizes first, pad every tensor to the largest, gather
# the padded tensors, then cut each back to its own size.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def all_gather_different_size(t: torch.Tensor) -> list[torch.Tensor]:
    world = dist.get_world_size()
    local_size = torch.tensor(t.shape)
    sizes = [torch.zeros_like(local_size) for _ in range(world)]
    dist.all_gather(sizes, local_size)
    max_size = torch.stack(sizes).max(dim=0).values
    padded = torch.zeros(*max_size.tolist(), dtype=t.dtype)
    padded[: t.shape[0]] = t
    out = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(out, padded)
    return [o[: int(s[0])] for o, s in zip(out, sizes)]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    preds = torch.randn(3 + 2 * rank, 10)
    gathered = all_gather_different_size(preds)
    print(rank, [g.shape[0] for g in gathered])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
