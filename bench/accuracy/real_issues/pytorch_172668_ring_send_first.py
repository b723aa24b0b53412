# Reduced from https://github.com/pytorch/pytorch/issues/172668 (the thread points at
# Megatron-LM's p2p_communication, which orders sends and receives by rank parity)
# Cause: every pipeline rank of a ring sends its activation to the next rank with a blocking
# send before receiving from the previous one; all ranks sit in send and none receives.
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
    dist.send(activation, dst=next_rank)
    dist.recv(received, src=prev_rank)
    print(rank, float(received[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
