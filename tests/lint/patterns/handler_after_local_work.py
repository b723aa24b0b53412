import torch.distributed as dist


def sync_metrics(metrics, device):
    # the `try` computes before it communicates: a rank whose computation raises runs the
    # handler's barrier while the others are in the all_reduce
    try:
        dist.all_reduce(metrics.compute().to(device))
    except RuntimeError:
        dist.barrier()
        raise
