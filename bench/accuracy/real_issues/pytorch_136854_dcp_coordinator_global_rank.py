# Reduced from https://github.com/pytorch/pytorch/pull/136854
# Cause: a checkpoint save on the data-parallel subgroup uses global rank 0 as its coordinator
# (gather / broadcast root); on the subgroup that does not contain global rank 0 the root is
# not a member.
import os
from datetime import timedelta

import torch.distributed as dist


def save(plan: dict, process_group) -> dict:
    coordinator = 0  # global rank 0, whatever the group
    plans = [None] * dist.get_world_size(process_group) if dist.get_rank() == coordinator else None
    dist.gather_object(plan, plans, dst=coordinator, group=process_group)
    final = [plans]
    dist.broadcast_object_list(final, src=coordinator, group=process_group)
    return {"n_plans": len(final[0] or [])}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    mp_size = 2
    # mesh (mp=2, dp=2): dp groups are [0, 2] and [1, 3]
    dp_groups = [dist.new_group([r for r in range(4) if r % mp_size == m]) for m in range(mp_size)]
    dp_group = dp_groups[rank % mp_size]
    print(rank, save({"rank": rank}, dp_group))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
