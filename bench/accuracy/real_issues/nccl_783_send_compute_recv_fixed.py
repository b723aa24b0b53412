# Reduced from https://github.com/NVIDIA/nccl/issues/783
# Fix (maintainer's answer): delay the send until the receive and issue them together, so
# they cannot block each other.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def op(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 1.01


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    peer = 1 - rank
    x0 = torch.full((1 << 20,), float(rank))
    x1 = op(x0)
    x2 = op(x1)
    other = torch.empty_like(x1)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x1, peer), dist.P2POp(dist.irecv, other, peer)])
    for r in reqs:
        r.wait()
    print(rank, float((x2 + other).mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
