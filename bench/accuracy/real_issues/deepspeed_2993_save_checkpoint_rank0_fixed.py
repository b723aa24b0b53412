# Reduced from https://github.com/deepspeedai/DeepSpeed/issues/2993
# Fix (DeepSpeed PR #801's documented requirement): every rank calls save_checkpoint; the
# engine itself decides which rank writes which file.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Engine:
    def __init__(self) -> None:
        self.module = torch.nn.Linear(4, 4)
        self.global_rank = dist.get_rank()

    def save_checkpoint(self, save_dir: str, tag: str) -> None:
        dist.barrier()
        partition = torch.cat([p.detach().flatten() for p in self.module.parameters()])
        shards = [torch.zeros_like(partition) for _ in range(dist.get_world_size())]
        dist.all_gather(shards, partition)
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
        if step == 1:
            engine.save_checkpoint(save_dir, tag=f"step{step}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
