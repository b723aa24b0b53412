"""Data-parallel topology with groups made when first needed."""
from __future__ import annotations

from functools import cached_property

import torch.distributed as dist


class Topology:
    def __init__(self, dp_size: int):
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dp_size = dp_size

    @cached_property
    def replica_ranks(self) -> list[int]:
        start = (self.rank // self.dp_size) * self.dp_size
        return list(range(start, start + self.dp_size))

    @cached_property
    def dp_group(self):
        group = None
        for start in range(0, self.world, self.dp_size):
            ranks = list(range(start, start + self.dp_size))
            g = dist.new_group(ranks)
            if self.rank in ranks:
                group = g
        return group

    @property
    def is_replica_leader(self) -> bool:
        return self.rank == self.replica_ranks[0]
