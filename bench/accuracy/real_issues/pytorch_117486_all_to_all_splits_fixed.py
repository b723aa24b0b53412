# Reduced from https://github.com/pytorch/pytorch/issues/117486
# Fix: exchange the split sizes first (an all_to_all_single of the per-peer counts), so each
# rank's output splits are exactly what the peers send.
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    input_splits = [2, 1] if rank == 0 else [1, 3]
    send_counts = torch.tensor(input_splits)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    output_splits = recv_counts.tolist()
    inp = torch.full((sum(input_splits), 4), float(rank))
    out = torch.empty(sum(output_splits), 4)
    dist.all_to_all_single(out, inp, output_split_sizes=output_splits, input_split_sizes=input_splits)
    print(rank, out[:, 0].tolist())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
