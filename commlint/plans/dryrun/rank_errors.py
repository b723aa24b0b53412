"""How one simulated rank ends when the program raises: the user's line of an exception, one
line for its message (DDP's unfinished-reduction error named for what it means), the
fake-tensor limits it ran into, placeholder numbers whose maker made no tensor, and the
bytes its fake tensors stand for.

Used by `child.run_rank` and `child._run_program`."""

from __future__ import annotations

import contextlib
import re
import sys
import traceback
from typing import Any

from torch._subclasses.fake_tensor import FakeTensor

from commlint.plans.dryrun import sites
from commlint.plans.dryrun.recorder import Recorder
from commlint.plans.dryrun.sites import is_user_file, short_path, user_site
from commlint.plans.dryrun.unread import RAISED as _RAISED


def _error_site(exc: BaseException) -> str | None:
    site = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if is_user_file(frame.f_code.co_filename):
            site = f"{short_path(frame.f_code.co_filename)}:{line}"
    return site


_DDP_UNFINISHED = "Expected to have finished reduction in the prior iteration"
_DDP_NO_GRAD = re.compile(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)")


def live_fake_bytes() -> int:
    """Bytes the rank's live fake tensors stand for (each storage once): what the same
    tensors would hold with real values, so a lower bound of a real re-run's memory."""
    import gc

    seen: set[int] = set()
    total = 0
    for obj in gc.get_objects():
        if issubclass(type(obj), FakeTensor):  # type(): a proxy's __class__ may raise
            try:
                storage = obj.untyped_storage()
                key = storage._cdata
            except Exception:  # a tensor whose storage cannot be asked for (sparse, nested)
                continue
            nbytes = storage.nbytes()
            if key not in seen and type(nbytes) is int:  # a data-dependent size: not counted
                seen.add(key)
                total += nbytes
    return total


def _one_line(exc: BaseException) -> str:
    """The exception's first line; DDP's unused-parameter error (whose first line stops
    mid-sentence) summed up."""
    text = str(exc).strip()
    if type(exc).__name__ == "GuardOnDataDependentSymNode":
        test = re.search(r"data-dependent expression (.+?) \(unhinted", text)
        return (
            f"{type(exc).__name__}: a data-dependent size (nonzero, unique, bincount, a "
            "boolean mask) decides what the program does here"
            + (f" ({test.group(1)})" if test else "")
        )
    if text.startswith(_DDP_UNFINISHED):
        return f"{type(exc).__name__}: {_ddp_unfinished(text)}"
    lines = text.splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _ddp_unfinished(text: str) -> str:
    """DDP's error when a parameter got no gradient in the previous backward (unused
    parameters without `find_unused_parameters=True`), as DDP says it, in one line."""
    found = _DDP_NO_GRAD.search(text)
    which = f"parameters {', '.join(found.group(1).split())}" if found else "some parameters"
    return (
        f"{_DDP_UNFINISHED} before starting a new one — DDP: {which} of this rank got no "
        "gradient in the previous backward (unused parameters); pass "
        "find_unused_parameters=True to DistributedDataParallel, or make every parameter "
        "take part in the loss"
    )


def _flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _note_fake_limits() -> None:
    """Note each fake-tensor limit as it is raised (`unread.RAISED`; `UnreadValueSteers` is a
    `DataDependentOutputException`)."""
    from torch._subclasses import fake_tensor as ft

    for cls in (ft.DataDependentOutputException, ft.DynamicOutputShapeException):
        init = cls.__init__

        def noted(self: Any, *a: Any, _init: Any = init, **k: Any) -> None:
            _init(self, *a, **k)
            site, _ = user_site(sites._frames(2))
            _RAISED[:] = [(_one_line(self), site)]

        cls.__init__ = noted


def _unconfirmed_tensor_makers(recorder: Recorder) -> dict[str, Any] | None:
    """A placeholder number given to a call the flow analysis took for a tensor's maker by
    its name alone, where no tensor was made of it: where it went is not known, so the rank
    ends as at a fake-tensor limit (a real re-run within the budget, else an error)."""
    from commlint.plans.dryrun import flow

    if not flow.UNCONFIRMED:
        return None
    file, line, name = next(iter(flow.UNCONFIRMED.values()))
    site = f"{short_path(file)}:{line}"
    message = (
        f"a number fake tensors did not compute went to {name} at {site}, taken "
        "for a tensor's maker by its name, and no tensor was made of it there"
    )
    recorder.send(("fake-limit", message, site, True, live_fake_bytes()))
    return {"kind": "exception", "message": message, "site": site}
