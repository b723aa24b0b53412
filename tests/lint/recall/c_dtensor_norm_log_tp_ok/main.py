# nproc: 4
# report: https://github.com/pytorch/pytorch/issues/109973 (DTensor on a 2-D DeviceMesh: which ranks a dim group holds)
# label: ok (real run: torchrun, gloo on CPU, torch 2.13; all four ranks ok)
import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from parallel import ShardedLinear, build_mesh


def log_weight_norm(layer, mesh, step):
    # full_tensor() gathers over tp: every tp rank of a replica joins; only the first
    # data-parallel replica logs (its tp ranks all take this branch together)
    if mesh["dp"].get_local_rank() == 0:
        full = layer.weight.full_tensor()
        print(f"step {step} dp {mesh['dp'].get_local_rank()} |W| = {full.norm():.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "15"))))
    torch.manual_seed(0)
    mesh = build_mesh(args.dp, args.tp)
    layer = ShardedLinear(mesh, 8, 8)
    for step in range(2):
        with torch.no_grad():
            layer(torch.randn(2, 8))
        log_weight_norm(layer, mesh, step)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
