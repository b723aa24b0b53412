"""Group creation that diverges across ranks: `lazy` creates an evaluation group only on the
ranks that evaluate (rank 0), so the metrics group every rank creates next gets another name
on rank 0 than on rank 1 and its rendezvous hangs; `mesh` builds a 2-D device mesh on rank 0
and a 1-D one on rank 1; `same` creates a mesh, subgroups and a group alike on every rank."""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
t = torch.ones(2)
dist.all_reduce(t)
print(f"rank {rank} creating at {time.time():.3f}", file=sys.stderr, flush=True)
if sys.argv[1] == "lazy":
    if rank in (0,):
        evaluation = dist.new_group([0], timeout=timedelta(seconds=30))
    metrics = dist.new_group(timeout=timedelta(seconds=30))
    dist.all_reduce(t, group=metrics)
elif sys.argv[1] == "mesh":
    from torch.distributed.device_mesh import init_device_mesh

    shape = (1, 2) if rank == 0 else (2,)
    mesh = init_device_mesh("cpu", shape)
    dist.all_reduce(t)
elif sys.argv[1] == "same":  # correct: every rank creates the same groups in one order
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
    dist.all_reduce(t, group=mesh.get_group("tp"))
    mine, _ = dist.new_subgroups(group_size=1)
    pair = dist.new_group([0, 1])
    dist.all_reduce(t, group=pair)
# one write of the whole line: the ranks share one pipe
sys.stdout.write(f"rank {rank} result {t.tolist()}\n")
sys.stdout.flush()
dist.destroy_process_group()
