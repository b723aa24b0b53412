"""A pipeline stage for torch.distributed.pipelining's schedule classes, without processes or
GPUs: the schedules read only a stage's index, counts and group sizes. Shared by
bench/pipelining.py and tests/plans/torch_pipelining.py (no commlint import here)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.pipelining.stage import _PipelineStageBase


class MockStage(_PipelineStageBase):
    """What a schedule's constructor reads from its stages; no process group, no GPU."""

    def __init__(
        self, stage_index: int, num_stages: int, group_size: int, group_rank: int = 0
    ) -> None:
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.submod = torch.nn.Linear(1, 1)
        self.stage_index_to_group_rank = {}

    def _create_grad_recv_info(self, *args: Any, **kwargs: Any) -> tuple:
        return ()

    def _prepare_forward_infra(self, *args: Any, **kwargs: Any) -> tuple:
        return ()

    def _prepare_backward_infra(self, *args: Any, **kwargs: Any) -> tuple:
        return ()
