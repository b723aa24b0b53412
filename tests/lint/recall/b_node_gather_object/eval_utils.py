"""Per-node evaluation: every node's leader collects its ranks' predictions."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass
class EvalResult:
    correct: int = 0
    total: int = 0
    samples: list = field(default_factory=list)


class NodeEvaluator:
    def __init__(self, gpus_per_node: int):
        self.node_group, _ = dist.new_subgroups(group_size=gpus_per_node)
        self.local_rank = dist.get_rank(self.node_group)
        self.node_size = dist.get_world_size(self.node_group)

    def collect(self, result: EvalResult):
        bucket = [None] * self.node_size if self.local_rank == 0 else None
        dist.gather_object(result, bucket, dst=0, group=self.node_group)
        if bucket is not None:
            total = sum(r.total for r in bucket)
            correct = sum(r.correct for r in bucket)
            log.info("node accuracy %.3f", correct / max(total, 1))
        return bucket
