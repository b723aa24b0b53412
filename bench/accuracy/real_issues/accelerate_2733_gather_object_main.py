# Reduced from https://github.com/huggingface/accelerate/issues/2733
# Cause: gather_object (an all_gather_object over every process) is called under
# `if is_main_process:`, so rank 0 waits for objects the other ranks never send.
import os
from datetime import timedelta

import torch.distributed as dist


def gather_object(obj: list) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return [x for part in out for x in part]


def grade(prompts: list[str]) -> list[str]:
    return [p.upper() for p in prompts]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    prompts = [f"prompt {i}" for i in range(8)][rank::2]
    txt_out = grade(prompts)
    if rank == 0:
        results = gather_object(txt_out)
        print(results[0])
        print(results[1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
