"""Column-sharded linear layer on a (dp=2, tp=2) mesh with a weight monitor.
Real run (torchrun, 4 processes, gloo, CPU): hang: a rank timed out waiting for a peer."""
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from monitor import WeightMonitor


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp_mesh = mesh["tp"]
    torch.manual_seed(0)
    params = {
        "w_in": distribute_tensor(torch.randn(16, 8), tp_mesh, [Shard(0)]),
        "w_out": distribute_tensor(torch.randn(8, 16), tp_mesh, [Shard(1)]),
    }
    monitor = WeightMonitor(mesh, every=2)
    for step in range(4):
        with torch.no_grad():
            for p in params.values():
                p.to_local().mul_(0.99)
        monitor.maybe_log(step, params)  # expect: CL115
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
