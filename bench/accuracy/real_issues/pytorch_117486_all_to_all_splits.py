# Reduced from https://github.com/pytorch/pytorch/issues/117486
# Cause: all_to_all_single with split sizes that do not agree across ranks — rank 0 expects
# more rows from rank 1 than rank 1 sends (each rank guessed its output splits locally).
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    # tokens routed to experts on rank 0 and rank 1
    input_splits = [2, 1] if rank == 0 else [1, 3]
    output_splits = [2, 3] if rank == 0 else [1, 3]  # rank 0 assumes rank 1 sends 3, it sends 1
    inp = torch.full((sum(input_splits), 4), float(rank))
    out = torch.empty(sum(output_splits), 4)
    dist.all_to_all_single(out, inp, output_split_sizes=output_splits, input_split_sizes=input_splits)
    print(rank, out[:, 0].tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
