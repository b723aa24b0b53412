# Reduced from https://github.com/huggingface/accelerate/issues/2690
# Fix: wait_for_everyone() is called by every process after the main process's save.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


class Accelerator:
    @property
    def is_main_process(self) -> bool:
        return dist.get_rank() == 0

    def wait_for_everyone(self) -> None:
        dist.barrier()


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    accelerator = Accelerator()
    model = torch.nn.Linear(8, 8)
    output_dir = tempfile.mkdtemp()
    for epoch in range(2):
        g = torch.ones(8)
        dist.all_reduce(g)
        if accelerator.is_main_process:
            torch.save(model.state_dict(), os.path.join(output_dir, f"model_{epoch}.pt"))
        accelerator.wait_for_everyone()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
