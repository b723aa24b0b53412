# Reduced from https://github.com/allenai/molmo/pull/33
# Fix: the resume block is dedented out of the rank-0 logging block, so every rank invokes
# the checkpoint loader.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def get_global_rank() -> int:
    return dist.get_rank()


def load_checkpoint(path: str, model: torch.nn.Module) -> int:
    obj = [torch.load(path) if get_global_rank() == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    model.load_state_dict(obj[0]["model"])
    dist.barrier()
    return obj[0]["step"]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    model = torch.nn.Linear(4, 4)
    ckpt = os.path.join(tempfile.gettempdir(), f"molmo33_{os.environ.get('MASTER_PORT', '0')}.pt")
    if get_global_rank() == 0:
        torch.save({"model": model.state_dict(), "step": 7}, ckpt)
    dist.barrier()
    cfg = {"allow_resume": True}
    start_step = 0
    if get_global_rank() == 0:
        print("Configuration:", cfg)
    if cfg["allow_resume"]:
        start_step = load_checkpoint(ckpt, model)
    for step in range(start_step, start_step + 2):
        g = torch.ones(4)
        dist.all_reduce(g)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
