# Reduced from https://github.com/ByteDance-Seed/VeOmni/pull/1164 (review thread)
# Cause: the node leader copies the staged checkpoint between two barriers, and the `finally`
# clause has a barrier too; if the leader's copy fails, its first barrier is the `finally` one
# while the other ranks are at the middle one, and the phases no longer line up.
import os
import shutil
import tempfile
from datetime import timedelta

import torch.distributed as dist


def promote(stage_path: str, final_path: str, is_node_leader: bool) -> None:
    try:
        if is_node_leader:
            shutil.copyfile(os.path.join(stage_path, ".metadata"), os.path.join(final_path, ".metadata"))
        dist.barrier()  # every rank sees the promoted metadata
        if is_node_leader:
            shutil.rmtree(stage_path, ignore_errors=True)
    finally:
        if dist.is_initialized():
            dist.barrier()


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    stage = tempfile.mkdtemp()  # the staged write did not leave a .metadata file
    final = tempfile.mkdtemp()
    promote(stage, final, is_node_leader=dist.get_rank() == 0)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
