"""Embedding table sharded over both dims of a 2-D mesh; metrics from one dp replica.
Real run (torchrun, 4 processes, gloo, CPU): hang: a rank timed out waiting for a peer."""
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from metrics import replicated_mean

log = logging.getLogger(__name__)
PLACEMENTS = [Shard(0), Shard(1)]


class Embedding2D:
    def __init__(self, mesh, vocab, dim):
        torch.manual_seed(0)
        self.table = distribute_tensor(torch.randn(vocab, dim), mesh, PLACEMENTS)
        self.dp_rank = mesh.get_local_rank("dp")

    def report(self):
        if self.dp_rank == 0:
            log.warning("embedding mean %.5f", replicated_mean(self.table))  # expect: CL115


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    emb = Embedding2D(mesh, vocab=64, dim=16)
    for _ in range(2):
        emb.report()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
