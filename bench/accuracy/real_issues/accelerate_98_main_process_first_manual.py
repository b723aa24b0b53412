# Reduced from https://github.com/huggingface/accelerate/pull/98
# A correct pattern the PR replaces with main_process_first(): the non-main processes wait
# before the cached work, the main process waits after it; every process calls
# wait_for_everyone exactly once, so they meet. A linter should stay silent.
import os
import tempfile
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist


def wait_for_everyone() -> None:
    dist.barrier()


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    is_main_process = dist.get_rank() == 0
    cache_fname = Path(tempfile.gettempdir()) / f"accel98_{os.environ.get('MASTER_PORT', '0')}.txt"
    if not is_main_process:
        wait_for_everyone()
    if cache_fname.exists():
        data = cache_fname.read_text()
    else:
        data = "data"  # time-consuming preprocessing
        cache_fname.write_text(data)
    if is_main_process:
        wait_for_everyone()
    print(dist.get_rank(), data)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
