# Reduced from https://github.com/NVIDIA/nccl/issues/783
# Cause: each rank computes, sends its result to the other, computes more, then receives the
# other's result; a send may block until the matching receive is posted, and both ranks are
# in their send.
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
    dist.send(x1, dst=peer)
    x2 = op(x1)
    other = torch.empty_like(x1)
    dist.recv(other, src=peer)
    print(rank, float((x2 + other).mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
