# Reduced from https://github.com/pytorch/pytorch/issues/130102
# Cause: each rank calls new_group with the member list of its own group only ([0, 3] on ranks
# 0 and 3, [1, 2] on ranks 1 and 2); new_group is collective over the whole world and must be
# called by every rank for every group, in the same order.
import os
from datetime import timedelta

import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    if rank == 0 or rank == 3:
        grp_ranks = [0, 3]
    else:
        grp_ranks = [1, 2]
    grp = dist.new_group(ranks=grp_ranks)
    print(rank, "before barrier:", dist.get_process_group_ranks(grp))
    dist.barrier(group=grp)
    print(rank, "done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
