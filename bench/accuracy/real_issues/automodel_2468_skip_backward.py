# Reduced from https://github.com/NVIDIA-NeMo/Automodel/pull/2468
# Cause: a micro-batch whose samples are all too short raises NoValidAnchorsError and the
# training loop skips it with a per-rank `continue`, so that rank never joins the gradient
# all-reduce its peer issues in backward.
import os
from datetime import timedelta

import torch
import torch.distributed as dist

BLOCK = 4


class NoValidAnchorsError(Exception):
    pass


def anchors(batch: list[int]) -> list[int]:
    valid = [n for n in batch if n >= BLOCK]
    if not valid:
        raise NoValidAnchorsError
    return valid


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    # sample lengths of each micro-batch; rank 1's second micro-batch is all short samples
    batches = [[8, 6], [9, 7], [5, 8]] if rank == 0 else [[7, 9], [2, 3], [6, 6]]
    grad = torch.zeros(32)
    for batch in batches:
        try:
            lengths = anchors(batch)
        except NoValidAnchorsError:
            continue
        grad.fill_(float(sum(lengths)))
        dist.all_reduce(grad)  # DDP's bucket all-reduce in backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
