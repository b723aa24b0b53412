# Reduced from https://github.com/pytorch/pytorch/issues/172668 (the thread points at
# Megatron-LM's p2p_communication, which orders sends and receives by rank parity)
# Fix: even ranks send first and then receive, odd ranks receive first and then send, so
# every blocking send finds its receive posted.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    next_rank, prev_rank = (rank + 1) % world, (rank - 1) % world
    activation = torch.full((1 << 20,), float(rank))
    received = torch.empty(1 << 20)
    if rank % 2 == 0:
        dist.send(activation, dst=next_rank)
        dist.recv(received, src=prev_rank)
    else:
        dist.recv(received, src=prev_rank)
        dist.send(activation, dst=next_rank)
    print(rank, float(received[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
