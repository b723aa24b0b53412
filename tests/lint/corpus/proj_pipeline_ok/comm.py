"""Pipeline p2p helpers: stage boundaries decided by the rank."""

import torch.distributed as dist


def is_first_stage():
    return dist.get_rank() == 0


def is_last_stage():
    return dist.get_rank() == dist.get_world_size() - 1


def recv_forward(buf):
    if not is_first_stage():
        dist.recv(buf, src=dist.get_rank() - 1)
    return buf


def send_forward(t):
    if not is_last_stage():
        dist.send(t, dst=dist.get_rank() + 1)
