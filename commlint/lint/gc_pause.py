"""The cyclic garbage collector held off while one file is parsed and analysed.

A file's syntax tree and the facts built from it are millions of objects that stay alive
until the file is done, and nearly none of them are in reference cycles (`ast` nodes have no
parent links; trees are freed by reference counting). With the
collector on, every time the heap grows by a quarter a full collection walks all of it: on a
2 MB generated file that was a third of the linter's CPU time (35 s -> 23.5 s without it, the
same peak memory). The collector is paused while one file is extracted and while one rule
checks the program, and resumed in between: the garbage in cycles (the per-rank evaluator's
caught exceptions hold their frames) is collected between files and between rules. In the
`commlint` command's own process the collector stays off after the extraction
(`commlint.gc_pause.collector_off_for_the_rest`): what is built then lives until the exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from commlint.gc_pause import paused_gc

__all__ = ["Survivors", "paused_gc", "survivors_kept_apart"]


class Survivors:
    """What a run builds and keeps to its end (every file's facts), kept out of the
    collector's walks once built: left in, the first collection after the extraction walked
    all of it again, and every full one after that (a tenth of the CPU time on a 2 MB file).
    `gc.freeze` moves every object alive into a generation the collector never walks;
    `release` hands them back (a caller that froze objects itself is left alone)."""

    def __init__(self) -> None:
        self.frozen = False

    def freeze(self) -> None:
        """Everything alive now joins the frozen (again, after more was built: the facts
        read from the cache first, then the ones extracted)."""
        if self.frozen or gc.get_freeze_count() == 0:
            gc.freeze()
            self.frozen = True

    def release(self) -> None:
        if self.frozen:
            gc.unfreeze()
            self.frozen = False


@contextmanager
def survivors_kept_apart() -> Iterator[Survivors]:
    """A `Survivors` released when the block ends, however it ends."""
    survivors = Survivors()
    try:
        yield survivors
    finally:
        survivors.release()
