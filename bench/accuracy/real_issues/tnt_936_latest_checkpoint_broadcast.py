# Reduced from https://github.com/meta-pytorch/tnt/pull/936
# Cause: get_latest_checkpoint_path broadcasts the path found by rank 0; a caller that reads a
# checkpoint and acts on it on rank 0 only calls it there, and the broadcast waits for ranks
# that never enter.
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist


def get_latest_checkpoint_path(dirpath: str) -> str | None:
    path = [None]
    if dist.get_rank() == 0:
        names = sorted(n for n in os.listdir(dirpath) if n.startswith("epoch_"))
        path[0] = os.path.join(dirpath, names[-1]) if names else None
    dist.broadcast_object_list(path, src=0)
    return path[0]


def main() -> None:
    timeout = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))
    dist.init_process_group("gloo", timeout=timeout)
    dirpath = tempfile.mkdtemp()
    for e in range(3):
        os.makedirs(os.path.join(dirpath, f"epoch_{e}"))
    if dist.get_rank() == 0:  # upload the newest checkpoint's metadata
        latest = get_latest_checkpoint_path(dirpath)
        print("uploading", latest)
    g = torch.ones(2)
    dist.all_reduce(g)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
