"""How a guarded program ends on stderr, and the trace it leaves behind.

Whatever the outcome, the last lines a rank prints are one block — the rule code and what
happened, a line per rank, the fix — and the frames of commlint's own wrappers are left out
of the traceback above it (`COMMLINT_GUARD_TRACEBACK=1` keeps them). `--save-trace DIR` is
written once there is a verdict (a fingerprint mismatch, a diagnosed hang, a killed stall)
and when the job ends cleanly.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any

_COMMLINT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
TRACE_NAME = "commlint-guard-trace.yaml"


def _ours(filename: str) -> bool:
    return (
        filename.startswith(_COMMLINT)
        or filename in ("<frozen runpy>",)
        or (filename.endswith("runpy.py"))
    )


def _hide(te: traceback.TracebackException, seen: set[int]) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _ours(f.filename)])
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _hide(chained, seen)


def format_exception(exc: BaseException) -> str:
    """The traceback of `exc` without commlint's frames (unless COMMLINT_GUARD_TRACEBACK=1).
    A `CommlintGuardError` ends with its block: the verdict is the last thing printed."""
    te = traceback.TracebackException.from_exception(exc)
    if os.environ.get("COMMLINT_GUARD_TRACEBACK", "0") in ("0", "", "no", "false"):
        _hide(te, set())
    return "".join(te.format())


def print_exception(exc: BaseException) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(format_exception(exc))
        sys.stderr.flush()


def save(folder: str | None, trace: Any, diagnosis: list[str]) -> str | None:
    """Write `trace` (a `commlint.trace.Trace`) as `folder/commlint-guard-trace.yaml`, the
    verdict in its meta; the path, or None when there is no folder or it cannot be written
    (said in one line: saving must never change how the job ends)."""
    if not folder or trace is None:
        return None
    try:
        from commlint.trace_io import dump_trace

        os.makedirs(folder, exist_ok=True)
        trace.meta = {**(trace.meta or {}), "argv": list(sys.argv), "diagnosis": diagnosis}
        path = os.path.join(folder, TRACE_NAME)
        dump_trace(trace, path)
    except Exception as exc:
        print(f"commlint guard: trace not written to {folder}: {exc}", file=sys.stderr)
        return None
    print(f"commlint guard: trace written to {path}", file=sys.stderr, flush=True)
    return path


def save_at_end(guard: Any, store: Any) -> None:
    """`--save-trace` at a clean end: the last rank to finish (it sees every rank's exit
    record; the store's counter picks one if two finish together) writes the job's trace."""
    from commlint.guard.diagnose import build_trace

    keys = [f"end/{r}" for r in range(guard.world_size)]
    if not store.check(keys) or int(store.add("saved", 1)) != 1:
        return
    states = {}
    for r, raw in enumerate(store.multi_get(keys)):
        states[r] = json.loads(raw)
        states[r]["status"] = "ended"
    trace, _ = build_trace(states, guard.world_size, guard.backend)
    save(guard.options.save_trace, trace, [])
