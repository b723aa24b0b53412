# Reduced from https://github.com/NVIDIA/nccl/issues/1417
# Fix (maintainer's rule): every rank all-reduces a buffer of the same size; each rank fills
# its own parameters' slots of the full flat buffer.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    sizes = [128, 64]
    owned = {0: [0, 1], 1: [0]}[rank]
    flat = torch.zeros(sum(sizes))
    offsets = [0, 128]
    for i in owned:
        flat[offsets[i] : offsets[i] + sizes[i]] = torch.randn(sizes[i])
    dist.all_reduce(flat)
    print(rank, flat.numel())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
