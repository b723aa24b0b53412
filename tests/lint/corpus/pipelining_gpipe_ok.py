"""Two pipeline stages, one microbatch count: GPipe moves every activation and gradient.
Run: torchrun --nproc-per-node 2"""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


def loss_fn(out, target):
    return (out - target).pow(2).mean()


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    stage = PipelineStage(torch.nn.Linear(8, 8), rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=loss_fn)
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(2):
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y)
    dist.barrier()


if __name__ == "__main__":
    main()
