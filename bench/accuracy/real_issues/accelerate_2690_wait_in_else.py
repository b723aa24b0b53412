# Reduced from https://github.com/huggingface/accelerate/issues/2690
# Cause: wait_for_everyone() is put in the `else` arm of `if accelerator.is_main_process:` —
# the main process saves and never calls it, the others wait in it while the main process
# goes on to the next collective.
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
        else:
            accelerator.wait_for_everyone()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
