import torch
import torch.distributed as dist


def sync_stats(stats, rank):
    try:
        if torch.isnan(stats).any():
            raise ValueError("nan in stats")
        dist.all_reduce(stats)  # expect: CL104
    except ValueError as err:
        print(f"rank {rank}: {err}")
    dist.barrier()


def sync_other(stats, rank):
    # a KeyError that no handler here catches: rank 1 crashes, the launcher stops the job
    try:
        if rank == 1:
            raise KeyError("rank 1 has no stats")
        dist.all_reduce(stats)
    except ValueError:
        print("not caught here")
    dist.barrier()
