import torch
import torch.distributed as dist


def world():
    return dist.get_world_size() if dist.is_initialized() else 1


def averaged(value):
    t = torch.as_tensor(value, dtype=torch.float32).clone()
    if world() > 1:
        dist.all_reduce(t)
        t /= world()
    return t


def sync_grads(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
