"""Tensor-parallel group setup in the Megatron style (hand-rolled)."""
from __future__ import annotations

import torch.distributed as dist

_TP_GROUP = None
_TP_RANKS = None


def initialize_tensor_parallel(tp_size: int) -> None:
    global _TP_GROUP, _TP_RANKS
    world = dist.get_world_size()
    layout = [list(range(start, start + tp_size)) for start in range(0, world, tp_size)]
    group, _ = dist.new_subgroups_by_enumeration(layout)
    _TP_GROUP = group
    _TP_RANKS = next(r for r in layout if dist.get_rank() in r)


def get_tp_group():
    return _TP_GROUP


def get_tp_src_rank() -> int:
    return _TP_RANKS[0]
