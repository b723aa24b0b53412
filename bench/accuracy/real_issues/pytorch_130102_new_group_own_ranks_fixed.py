# Reduced from https://github.com/pytorch/pytorch/issues/130102
# Fix: every rank creates both groups, in the same order, and then uses its own.
import os
from datetime import timedelta

import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    outer = dist.new_group(ranks=[0, 3])
    inner = dist.new_group(ranks=[1, 2])
    grp = outer if rank in (0, 3) else inner
    print(rank, "before barrier:", dist.get_process_group_ranks(grp))
    dist.barrier(group=grp)
    print(rank, "done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
