import contextlib

import torch
import torch.distributed as dist


def broadcast_sigterm(trainer, device):
    # lightning's _broadcast_sigterm_tensor: rank 0's flag is broadcast; if that fails, the
    # flag is the constant 0 on every rank — no rank can take the barrier alone
    try:
        flag = torch.tensor([1 if trainer.received_sigterm else 0], device=device)
        dist.broadcast(flag, src=0)
    except Exception:
        flag = torch.tensor([0], device=device)
    if flag.item() == 1:
        with contextlib.suppress(Exception):
            dist.barrier()
        raise SystemExit(1)
