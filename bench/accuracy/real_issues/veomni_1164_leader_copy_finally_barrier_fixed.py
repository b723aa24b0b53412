# Reduced from https://github.com/ByteDance-Seed/VeOmni/pull/1164 (review thread)
# Fix (review suggestion): copy errors are coordinated across all ranks — the leader's
# success flag is all-reduced, every rank takes the same path, and the phases stay aligned.
import os
import shutil
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def any_rank_failed(failed: bool) -> bool:
    flag = torch.tensor([int(failed)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def promote(stage_path: str, final_path: str, is_node_leader: bool) -> bool:
    failed = False
    if is_node_leader:
        try:
            shutil.copyfile(os.path.join(stage_path, ".metadata"), os.path.join(final_path, ".metadata"))
        except OSError:
            failed = True
    if any_rank_failed(failed):
        return False  # every rank keeps the previous checkpoint
    dist.barrier()
    if is_node_leader:
        shutil.rmtree(stage_path, ignore_errors=True)
    return True


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    stage = tempfile.mkdtemp()
    final = tempfile.mkdtemp()
    ok = promote(stage, final, is_node_leader=dist.get_rank() == 0)
    print(dist.get_rank(), "promoted" if ok else "kept the previous checkpoint")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
