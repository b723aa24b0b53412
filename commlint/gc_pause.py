"""The cyclic garbage collector held off around work that builds millions of small objects
that never form cycles (a file's syntax trees, a compiled trace, an imported table): with it
on, every time the heap grows by a quarter a full collection walks all of them again."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold the cyclic collector off inside the block (nests; restores what it found)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
