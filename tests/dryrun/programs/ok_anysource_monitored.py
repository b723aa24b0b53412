"""Correct: rank 0 receives one message from each other rank in any order (`recv(src=None)`),
and every rank meets in gloo's monitored barrier, on the world and on a subgroup.

The senders wait for rank 0's acknowledgement before the barrier: gloo's monitored barrier
sends to rank 0 on the same group, and a fast sender's barrier message could otherwise meet
rank 0's still-open any-source receive (seen once on a loaded machine: senders {1, 3})."""

from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pair = dist.new_group([0, 1])
buf = torch.zeros(4)
ack = torch.zeros(1)
if rank == 0:
    senders = {dist.recv(buf, src=None) for _ in range(world - 1)}
    assert senders == set(range(1, world)), senders
    for r in range(1, world):
        dist.send(ack, dst=r)
else:
    dist.send(torch.full((4,), float(rank)), dst=0)
    dist.recv(ack, src=0)
dist.monitored_barrier(timeout=timedelta(seconds=20))
if rank in (0, 1):
    dist.monitored_barrier(group=pair, wait_all_ranks=True)
dist.destroy_process_group()
