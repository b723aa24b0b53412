# Reduced from https://github.com/huggingface/accelerate/issues/2733
# Fix (maintainer's answer): call gather_object on every process and print on the main one.
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
    results = gather_object(txt_out)
    if rank == 0:
        print(results[0])
        print(results[1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
