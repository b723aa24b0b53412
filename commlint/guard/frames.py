"""Small pieces every part of the guard uses, below them all: where a frame is (a path
relative to the working directory), a thread's frames outward, an exception in one line.
The guard's core, its watchdog and its liveness probe import them from here, so none of
them has to import another to name a place or an error."""

from __future__ import annotations

import functools
import os
from typing import Any


@functools.lru_cache(maxsize=8192)
def short_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies under it (cached: the
    guard names four frames per call, and `relpath` reads the working directory each time)."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _outward(frame: Any) -> Any:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _brief(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__
