# Reduced from https://github.com/NVIDIA-NeMo/RL/pull/4045 (review thread)
# Fix: the earlier stages enter the load too, requesting no shard, so the collective is met
# by every rank in lockstep.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def dist_checkpointing_load(requested: dict) -> dict:
    plans = [None] * dist.get_world_size()
    dist.all_gather_object(plans, sorted(requested))
    return {k: torch.zeros(4) for k in requested}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    pp_rank, pp_size = dist.get_rank(), dist.get_world_size()
    is_last_stage = pp_rank == pp_size - 1
    requested = {"output_layer.weight": None} if is_last_stage else {}
    shard = dist_checkpointing_load(requested)
    print(pp_rank, "loaded", list(shard))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
