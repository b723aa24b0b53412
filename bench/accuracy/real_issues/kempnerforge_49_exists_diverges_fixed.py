# Reduced from https://github.com/KempnerInstitute/KempnerForge/pull/50
# Fix: rank 0's exists() decides for the group — the flag is broadcast, every rank takes the
# same branch, and only rank 0 reads the file.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def load(ckpt_dir: str) -> dict:
    state = {"step": 0}
    train_state_path = os.path.join(ckpt_dir, "train_state.pt")
    flag = torch.tensor([int(os.path.exists(train_state_path)) if dist.get_rank() == 0 else 0])
    dist.broadcast(flag, src=0)
    if bool(flag.item()):
        obj = [torch.load(train_state_path) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(obj, src=0)
        state = obj[0]
    return state


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
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
