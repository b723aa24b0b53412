# Reduced from https://github.com/bghira/SimpleTuner/issues/262
# Fix (from the diffusers thread): save_state is called on every process; the state gathering
# happens on all of them and only the main process writes.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Accelerator:
    def __init__(self) -> None:
        self.is_main_process = dist.get_rank() == 0

    def save_state(self, output_dir: str, optimizer_shard: torch.Tensor) -> None:
        shards = [torch.zeros_like(optimizer_shard) for _ in range(dist.get_world_size())]
        dist.all_gather(shards, optimizer_shard)
        if self.is_main_process:
            os.makedirs(output_dir, exist_ok=True)
            torch.save(torch.cat(shards), os.path.join(output_dir, "optimizer.bin"))


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    accelerator = Accelerator()
    shard = torch.full((16,), float(dist.get_rank()))
    out = tempfile.mkdtemp()
    checkpointing_steps = 2
    for global_step in range(1, 5):
        loss = torch.tensor(1.0 / global_step)
        dist.all_reduce(loss)
        if global_step % checkpointing_steps == 0:
            accelerator.save_state(os.path.join(out, f"checkpoint-{global_step}"), shard)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
