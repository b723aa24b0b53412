"""Tensor-parallel groups built by hand, wrapped in a DeviceMesh for DTensor.
Real run (torchrun, 4 processes, gloo, CPU): hang: a rank timed out waiting for a peer."""
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

TIMEOUT = timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6")))


def build_tp_group(tp_size):
    world = dist.get_world_size()
    mine = None
    for start in range(0, world, tp_size):
        ranks = list(range(start, start + tp_size))
        g = dist.new_group(ranks, timeout=TIMEOUT)
        if dist.get_rank() in ranks:
            mine = g
    return mine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=TIMEOUT)
    tp_group = build_tp_group(args.tp)
    tp_mesh = DeviceMesh.from_group(tp_group, "cpu")
    torch.manual_seed(dist.get_rank())
    local = torch.randn(4, 6)
    activations = DTensor.from_local(local, tp_mesh, [Shard(0)])
    # the first process of each tp group writes the gathered activations
    if dist.get_rank(tp_group) == 0:
        full = activations.full_tensor()  # expect: CL115
        print("rank", dist.get_rank(), "gathered", tuple(full.shape))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
