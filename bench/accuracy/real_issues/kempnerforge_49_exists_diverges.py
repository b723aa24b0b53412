# Reduced from https://github.com/KempnerInstitute/KempnerForge/issues/49
# Cause: load() checks train_state_path.exists() independently on every rank; on a distributed
# file system the answers can differ, so some ranks enter the branch with the object broadcast
# and the others skip it.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def load(ckpt_dir: str) -> dict:
    state = {"step": 0}
    train_state_path = os.path.join(ckpt_dir, "train_state.pt")
    if os.path.exists(train_state_path):
        obj = [torch.load(train_state_path) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(obj, src=0)
        state = obj[0]
    return state


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    # the checkpoint directory as each rank sees it: rank 0 has just written train_state.pt,
    # rank 1's view of the (stale) directory does not have it yet
    ckpt_dir = tempfile.mkdtemp(prefix=f"ckpt_rank{rank}_")
    if rank == 0:
        torch.save({"step": 100}, os.path.join(ckpt_dir, "train_state.pt"))
    state = load(ckpt_dir)
    step = torch.tensor([state["step"]])
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    print(rank, int(step))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
