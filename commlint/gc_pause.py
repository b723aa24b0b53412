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


_SHORT_LIVED = False
_FREEZE_AT_EXIT = False


def process_ends_with_command() -> None:
    """Said by the `commlint` entry point alone: this process ends when the command does."""
    global _SHORT_LIVED
    _SHORT_LIVED = True


def collector_off_for_the_rest() -> None:
    """In the command's own process, the cyclic collector is off from here to the exit.

    Everything a `check` builds after its extraction (the rules' work, the findings, the report)
    lives until the report is written, and then the process ends: collecting on the way only
    walked it all again, up to a full walk of every object alive when the run's objects fell
    out of use (1.0 + 1.1 + 3.5 of 17 CPU seconds on a 2 MB file). The garbage left in cycles
    meanwhile costs memory until the exit, never more than one rule's already did (each rule
    runs with the collector paused). A caller that imports commlint keeps its collector."""
    global _FREEZE_AT_EXIT
    if _SHORT_LIVED:
        gc.disable()
        _FREEZE_AT_EXIT = True


def freeze_at_exit() -> bool:
    """Whether the exit may skip the interpreter's last walk of everything still alive (a
    `check` that turned the collector off: the linter never loads native extensions that
    report objects still alive at exit, as torch's and triton's do when a dry-run ran)."""
    return _FREEZE_AT_EXIT
