# Reduced from https://github.com/pytorch/pytorch/pull/136854
# Fix: the coordinator is the group's rank 0 translated to its global rank, so each subgroup
# gathers to and broadcasts from one of its own members.
import os
from datetime import timedelta

import torch.distributed as dist


def save(plan: dict, process_group) -> dict:
    coordinator = dist.get_global_rank(process_group, 0)
    is_coordinator = dist.get_rank() == coordinator
    plans = [None] * dist.get_world_size(process_group) if is_coordinator else None
    dist.gather_object(plan, plans, dst=coordinator, group=process_group)
    final = [plans]
    dist.broadcast_object_list(final, src=coordinator, group=process_group)
    return {"n_plans": len(final[0] or [])}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    mp_size = 2
    dp_groups = [dist.new_group([r for r in range(4) if r % mp_size == m]) for m in range(mp_size)]
    dp_group = dp_groups[rank % mp_size]
    print(rank, save({"rank": rank}, dp_group))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
