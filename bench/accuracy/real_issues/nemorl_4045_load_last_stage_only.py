# Reduced from https://github.com/NVIDIA-NeMo/RL/pull/4045 (review thread)
# Cause: under pipeline parallelism only the last stage owns the output layer, so only it
# calls the checkpoint loader for the teacher head; the loader is a whole-world collective
# and the last stage waits for the earlier stages.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def dist_checkpointing_load(requested: dict) -> dict:
    # every rank of the world exchanges its read plan with the others
    plans = [None] * dist.get_world_size()
    dist.all_gather_object(plans, sorted(requested))
    return {k: torch.zeros(4) for k in requested}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    pp_rank, pp_size = dist.get_rank(), dist.get_world_size()
    is_last_stage = pp_rank == pp_size - 1
    if is_last_stage:
        shard = dist_checkpointing_load({"output_layer.weight": None})
        print("loaded", list(shard))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
