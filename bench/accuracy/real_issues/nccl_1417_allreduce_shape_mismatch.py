# Reduced from https://github.com/NVIDIA/nccl/issues/1417
# Cause: an all-reduce whose element count differs across ranks (each rank flattens the
# gradients of the parameters it owns); NCCL may hang or return wrong data, other backends
# reject it.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    owned = [torch.randn(128), torch.randn(64)] if rank == 0 else [torch.randn(128)]
    flat = torch.cat(owned)
    dist.all_reduce(flat)
    print(rank, flat.numel())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
