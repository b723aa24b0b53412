"""GPipe over a 2x2 (dp, pp) mesh: each data-parallel replica is a two-stage pipeline.
Real run (torchrun, 4 processes, gloo, CPU): hang: a rank timed out waiting for a peer."""
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from pipe_utils import PipeConfig, build_stage_module, make_schedule

logger = logging.getLogger(__name__)


def load_rows(cfg: PipeConfig):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg.num_samples, cfg.dim, generator=g)
    y = x.sum(dim=1, keepdim=True)
    return x, y


def main():
    cfg = PipeConfig()
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(os.environ.get("CASE_TIMEOUT_S", "6"))))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "pp"))
    rank, world = dist.get_rank(), dist.get_world_size()
    stage_idx = mesh["pp"].get_local_rank()
    x, y = load_rows(cfg)
    # every rank reads its own strided slice of the rows
    local_x, local_y = x[rank::world], y[rank::world]
    n_micro = len(local_x) // cfg.micro_batch
    local_x, local_y = local_x[: n_micro * cfg.micro_batch], local_y[: n_micro * cfg.micro_batch]
    module = build_stage_module(stage_idx, cfg.dim)
    stage, schedule = make_schedule(module, stage_idx, 2, mesh["pp"].get_group(), n_micro)
    opt = torch.optim.SGD(module.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        opt.zero_grad()
        if stage.is_first:
            schedule.step(local_x)  # expect: CL115
        else:
            losses = []
            schedule.step(target=local_y, losses=losses)
            logger.info("step %d loss %.4f", step, torch.stack(losses).mean().item())
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
