import torch.distributed as dist


def sync_stats(stats, group=None):
    for name in set(stats):
        dist.all_reduce(stats[name], group=group)


def sync_ids(buffers):
    for i in set(range(len(buffers))):
        dist.all_reduce(buffers[i])
