# Reduced from https://github.com/huggingface/transformers/issues/31532
# Fix: the evaluation trigger counts completed steps on every process instead of reading the
# main-process-only progress bar.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


class ProgressBar:
    def __init__(self, total: int, disable: bool) -> None:
        self.total = total
        self.disable = disable
        self.n = 0

    def update(self, k: int = 1) -> None:
        if not self.disable:
            self.n += k


def gather_for_metrics(t: torch.Tensor) -> torch.Tensor:
    out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return torch.cat(out)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    is_main_process = dist.get_rank() == 0
    progress_bar = ProgressBar(total=12, disable=not is_main_process)
    eval_steps = 4
    completed_steps = 0
    for step in range(12):
        grad = torch.ones(8)
        dist.all_reduce(grad)
        progress_bar.update(1)
        completed_steps += 1
        if completed_steps % eval_steps == 0:
            preds = torch.full((4,), float(step))
            gathered = gather_for_metrics(preds)
            if is_main_process:
                print("eval", step, float(gathered.mean()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
