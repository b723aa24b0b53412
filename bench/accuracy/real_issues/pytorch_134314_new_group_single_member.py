# Reduced from https://github.com/pytorch/pytorch/issues/134314
# The program is correct by the API (every rank calls new_group([0]) and then the world
# barrier); the reported hang came from NCCL's lazy communicator split, not from the program.
# On gloo it finishes: a linter should stay silent.
import os
from datetime import timedelta

import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    g = dist.new_group(ranks=[0])
    dist.barrier()
    if dist.get_rank() == 0:
        dist.barrier(group=g)
    print("Done!")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
