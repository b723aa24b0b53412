"""Process groups created on first use and cached."""
from __future__ import annotations

import torch.distributed as dist


class GroupRegistry:
    def __init__(self):
        self._groups: dict[tuple[int, ...], object] = {}

    def get(self, ranks):
        key = tuple(sorted(ranks))
        if key not in self._groups:
            self._groups[key] = dist.new_group(list(key))
        return self._groups[key]
