# Reduced from https://github.com/pytorch/pytorch/issues/73383 (rank0_only: PR #75908)
# Fix: every rank calls state_dict() (every rank joins the gather); with rank0_only the full
# dict is kept on rank 0 only, which alone saves it.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class ShardedModule:
    def __init__(self, numel: int) -> None:
        self.shard = torch.randn(numel // dist.get_world_size())

    def state_dict(self, rank0_only: bool = True) -> dict:
        parts = [torch.zeros_like(self.shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, self.shard)
        if rank0_only and dist.get_rank() != 0:
            return {}
        return {"flat_param": torch.cat(parts)}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    model = ShardedModule(64)
    out = tempfile.mkdtemp()
    for step in range(3):
        g = torch.ones_like(model.shard)
        dist.all_reduce(g)
        if step == 1:
            state = model.state_dict(rank0_only=True)
            if dist.get_rank() == 0:
                torch.save(state, os.path.join(out, "full.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
