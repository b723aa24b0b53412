"""ZeRO-style all-gather in shards: every partition is padded to the same size."""

import torch.distributed as dist


def allgather_partitions(partitions, group, bucket_size):
    partition_id = dist.get_rank(group=group)
    world = dist.get_world_size(group=group)
    num_shards = max(1, partitions[partition_id].numel() * world // bucket_size)
    shard_size = partitions[partition_id].numel() // num_shards
    for shard_id in range(num_shards):
        shards = [p.narrow(0, shard_id * shard_size, shard_size) for p in partitions]
        dist.all_gather(shards, shards[partition_id], group=group)
