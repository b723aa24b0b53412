# Reduced from https://github.com/meta-pytorch/torchrec/issues/3278
# Cause: invoke_on_rank_and_broadcast_result picks the invoking rank by its rank in the group
# (pg.rank() == rank) but passes the same number to broadcast_object_list as `src`, which is a
# global rank; on a subgroup that does not contain global rank 0 the root is not a member.
import os
from datetime import timedelta

import torch.distributed as dist


def invoke_on_rank_and_broadcast_result(pg, rank: int, func, *args):
    if pg.rank() == rank:
        object_list = [func(*args)]
    else:
        object_list = [None]
    if pg.size() > 1:
        dist.broadcast_object_list(object_list, rank, group=pg)
    return object_list[0]


def plan_sharding(n_tables: int) -> dict:
    return {f"table_{i}": i % 2 for i in range(n_tables)}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # one planner group per node
    pg = groups[rank // 2]
    plan = invoke_on_rank_and_broadcast_result(pg, 0, plan_sharding, 4)
    print(rank, plan)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
