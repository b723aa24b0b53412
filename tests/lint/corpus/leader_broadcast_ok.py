"""A bridge between two grids: the local leader broadcasts what it received to its group."""

import torch
import torch.distributed as dist


class Bridge:
    def __init__(self, comm_map, leader, group):
        self.current_rank = dist.get_rank()
        self.comm_map = comm_map
        self.leader = leader
        self.group = group

    def forward(self, shape):
        info = self.comm_map.get(self.current_rank)
        buf = torch.empty(shape)
        if info.role == "receiver":
            dist.recv(buf, src=info.peer)
            dist.broadcast(buf, src=self.current_rank, group=self.group)
        else:
            dist.broadcast(buf, src=self.leader, group=self.group)
        return buf
