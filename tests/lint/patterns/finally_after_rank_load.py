import torch
import torch.distributed as dist


def step(model):
    try:
        x = torch.load(f"shards/{dist.get_rank()}.pt")  # missing on one rank: it goes to `finally`
        loss = model(x)
        dist.all_reduce(loss)
    finally:
        dist.barrier()
