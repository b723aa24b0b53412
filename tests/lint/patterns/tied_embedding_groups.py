import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pp = world  # one pipeline of `world` stages
first, last = 0, pp - 1
if rank == first:
    embedding_ranks = [first, last]
else:
    embedding_ranks = [first, last, pp // 2]  # the last stage also ties the middle one
embedding_group = dist.new_group(embedding_ranks)
if rank in embedding_ranks:
    dist.all_reduce(torch.zeros(4), group=embedding_group)
