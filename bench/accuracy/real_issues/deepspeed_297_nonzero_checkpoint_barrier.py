# Reduced from https://github.com/deepspeedai/DeepSpeed/pull/297
# Cause: save_checkpoint synchronised all ranks even without ZeRO, where the model state is
# replicated and a script may save from rank 0 only; that rank then waits in the barrier.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Engine:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.module = torch.nn.Linear(4, 4)

    def zero_optimization(self) -> bool:
        return self.config.get("zero_optimization", {}).get("stage", 0) > 0

    def save_checkpoint(self, save_dir: str) -> None:
        dist.barrier()
        torch.save(self.module.state_dict(), os.path.join(save_dir, "mp_rank_00_model_states.pt"))


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    engine = Engine({"train_batch_size": 8})  # no ZeRO: every rank holds the full state
    save_dir = tempfile.mkdtemp()
    for step in range(3):
        g = torch.ones(4)
        dist.all_reduce(g)
        if dist.get_rank() == 0:
            engine.save_checkpoint(save_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
