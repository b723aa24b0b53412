# Reduced from https://github.com/meta-pytorch/torchrec/issues/3278
# Fix: the root is given as a group rank (group_src), matching the pg.rank() test, so every
# group broadcasts from its own member.
import os
from datetime import timedelta

import torch.distributed as dist


def invoke_on_rank_and_broadcast_result(pg, rank: int, func, *args):
    if pg.rank() == rank:
        object_list = [func(*args)]
    else:
        object_list = [None]
    if pg.size() > 1:
        dist.broadcast_object_list(object_list, group=pg, group_src=rank)
    return object_list[0]


def plan_sharding(n_tables: int) -> dict:
    return {f"table_{i}": i % 2 for i in range(n_tables)}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    pg = groups[rank // 2]
    plan = invoke_on_rank_and_broadcast_result(pg, 0, plan_sharding, 4)
    print(rank, plan)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
