# Reduced from https://github.com/NVIDIA/nccl/issues/479
# Fix (maintainer's answer): post the send and the receive together, as one grouped
# send/recv (torch: batch_isend_irecv), so neither waits for the other.
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
    ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    print(rank, float(theirs[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
