"""Correct: rank 0 receives one message from each other rank in any order (`recv(src=None)`),
and every rank meets in gloo's monitored barrier, on the world and on a subgroup."""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pair = dist.new_group([0, 1])
buf = torch.zeros(4)
if rank == 0:
    senders = {dist.recv(buf, src=None) for _ in range(world - 1)}
    assert senders == set(range(1, world)), senders
else:
    dist.send(torch.full((4,), float(rank)), dst=0)
dist.monitored_barrier(timeout=timedelta(seconds=20))
if rank in (0, 1):
    dist.monitored_barrier(group=pair, wait_all_ranks=True)
dist.destroy_process_group()
