# Reduced from https://github.com/mila-iqia/mila-docs/pull/151
# A correct pattern from the tutorial under review: the master downloads then waits at the
# barrier, the others wait at the barrier then read without downloading. Each arm has exactly
# one barrier, so the ranks meet; a linter should stay silent.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def get_dataset(path: str, download: bool) -> torch.Tensor:
    f = os.path.join(path, "data.pt")
    if download:
        torch.save(torch.arange(12, dtype=torch.float32), f)
    return torch.load(f)


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    is_master = rank == 0
    dataset_path = os.path.join(tempfile.gettempdir(), f"miladocs_151_{os.environ.get('MASTER_PORT', '0')}")
    os.makedirs(dataset_path, exist_ok=True)
    if is_master:  # download THEN barrier
        dataset = get_dataset(dataset_path, download=True)
        dist.barrier()
    else:  # barrier THEN no download
        dist.barrier()
        dataset = get_dataset(dataset_path, download=False)
    partial = torch.zeros(1)
    for i in range(rank, len(dataset), world_size):
        partial += dataset[i]
    dist.all_reduce(partial)
    print(rank, float(partial))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
