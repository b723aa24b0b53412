# Reduced from https://github.com/deepspeedai/DeepSpeed/issues/2993
# (requirement documented in https://github.com/deepspeedai/DeepSpeed/pull/801)
# Cause: DeepSpeedEngine.save_checkpoint is collective (it synchronises the ranks and gathers
# partitioned state) but the training script calls it under `if rank == 0:` like a plain
# torch.save; rank 0 waits inside it for ranks that never come.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Engine:
    """The collectives of DeepSpeedEngine.save_checkpoint, with a plain model."""

    def __init__(self) -> None:
        self.module = torch.nn.Linear(4, 4)
        self.global_rank = dist.get_rank()

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        dist.barrier()  # every rank enters the save together
        partition = torch.cat([p.detach().flatten() for p in self.module.parameters()])
        shards = [torch.zeros_like(partition) for _ in range(dist.get_world_size())]
        dist.all_gather(shards, partition)  # zero-partitioned optimizer state
        if self.global_rank == 0:
            torch.save(self.module.state_dict(), os.path.join(save_dir, f"{tag}.pt"))
        dist.barrier()


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    engine = Engine()
    save_dir = tempfile.mkdtemp()
    for step in range(4):
        grad = torch.ones(4)
        dist.all_reduce(grad)
        if step == 1 and dist.get_rank() == 0:
            engine.save_checkpoint(save_dir, tag=f"step{step}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
