# Reduced from https://github.com/dylanyunlon/Neuron_SP/issues/197
# Cause: finalize_model_grads is asked to skip the gradient reduction but to force a one-
# element all-reduce (the grad-norm / nan flag) on the logging rank only; rank 0 issues an
# ALLREDUCE with NumelIn=1 that the other ranks never issue.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def finalize_model_grads(grads: torch.Tensor, skip: bool, force_ar: bool) -> None:
    if not skip:
        dist.all_reduce(grads)
    if force_ar:
        nan_flag = torch.tensor([float(torch.isnan(grads).any())])
        dist.all_reduce(nan_flag)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    is_logging_rank = rank == 0
    grads = torch.randn(64)
    for step in range(3):
        gnorm = torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(grads.clone())], 1.0)
        finalize_model_grads(grads, skip=True, force_ar=is_logging_rank)
        dist.all_reduce(grads)  # optimizer.step's reduction
        if rank == 0:
            print(step, float(gnorm))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
