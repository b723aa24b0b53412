"""A 1F1B pipeline whose last stage skips a step on its own data: the first stage's next step
waits for gradients that never come. Run: torchrun --nproc-per-node 2"""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B


def loss_fn(out, target):
    return (out - target).pow(2).mean()


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    stage = PipelineStage(torch.nn.Linear(8, 8), rank, world, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=2, loss_fn=loss_fn)
    for step in range(3):
        x, y = torch.randn(8, 8), torch.randn(8, 8)
        if rank == 0:
            schedule.step(x)  # expect: CL101
        elif step != 1:
            schedule.step(target=y)
    dist.barrier()


if __name__ == "__main__":
    main()
