"""Roles chosen from the rank; only the coordinator synchronises."""

import torch.distributed as dist


def step(state):
    role = "coordinator" if dist.get_rank() == 0 else "worker"
    match role:
        case "coordinator":
            state.plan()
            dist.barrier()  # expect: CL101
        case "worker":
            state.work()
