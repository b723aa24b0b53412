# Reduced from https://github.com/dylanyunlon/Neuron_SP/issues/197
# Fix (the plan): the scalar nan-check all-reduce is made unconditional, under the same
# condition on every rank.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def finalize_model_grads(grads: torch.Tensor, skip: bool) -> None:
    if not skip:
        dist.all_reduce(grads)
    nan_flag = torch.tensor([float(torch.isnan(grads).any())])
    dist.all_reduce(nan_flag)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    grads = torch.randn(64)
    for step in range(3):
        gnorm = torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(grads.clone())], 1.0)
        finalize_model_grads(grads, skip=True)
        dist.all_reduce(grads)
        if rank == 0:
            print(step, float(gnorm))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
