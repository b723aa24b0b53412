# Reduced from https://github.com/NVIDIA/nccl/issues/479
# Cause: both ranks issue a blocking send to each other before their receive; each send waits
# for a receive the peer has not posted yet.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    peer = 1 - rank
    mine = torch.full((1 << 20,), float(rank))
    theirs = torch.empty(1 << 20)
    dist.send(mine, dst=peer)
    dist.recv(theirs, src=peer)
    print(rank, float(theirs[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
