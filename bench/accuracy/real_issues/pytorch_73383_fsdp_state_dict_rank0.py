# Reduced from https://github.com/pytorch/pytorch/issues/73383
# Cause: materialising the full state dict gathers every rank's parameter shards, so all ranks
# must call it ("otherwise this will result in desync"); a script that calls state_dict() only
# on the saving rank leaves rank 0 waiting in the gather.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class ShardedModule:
    """A flat-parameter module sharded over the ranks (as FSDP does)."""

    def __init__(self, numel: int) -> None:
        self.shard = torch.randn(numel // dist.get_world_size())

    def state_dict(self) -> dict:
        parts = [torch.zeros_like(self.shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, self.shard)  # summon_full_params
        return {"flat_param": torch.cat(parts)}


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    model = ShardedModule(64)
    out = tempfile.mkdtemp()
    for step in range(3):
        g = torch.ones_like(model.shard)
        dist.all_reduce(g)
        if step == 1 and dist.get_rank() == 0:
            torch.save(model.state_dict(), os.path.join(out, "full.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
