"""Run one function in a child interpreter, so a native crash of a parser costs one input.

The linter's engine does this for very deep source files (a crash there costs one file);
readers above it (the nnScaler importer, whose LibCST parser is native) use this small helper
instead of reaching into the linter.
The function is named by module and attribute (never pickled code); its argument and result
cross the pipe as pickles between this interpreter and a child of the same code.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any


class IsolatedFailure(Exception):
    """The child crashed, timed out or answered garbage; the message says which, in words."""


class IsolatedError(Exception):
    """The function raised in the child: `kind` is the exception's class name, `state` what
    `reduce_error` kept of it (for readers: their located error's message, path and line)."""

    def __init__(self, kind: str, state: Any) -> None:
        super().__init__(kind, state)
        self.kind, self.state = kind, state


def call_isolated(module: str, name: str, arg: Any, timeout: float = 120.0) -> Any:
    """`module.name(arg)` in a child interpreter; its result, else `IsolatedError` (it
    raised) or `IsolatedFailure` (a signal, a timeout, a broken answer)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH")) if x)
    code = "from commlint.isolate import _child; _child()"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            input=pickle.dumps((module, name, arg)),
            capture_output=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise IsolatedFailure(f"the parser ran past {timeout:g} s") from None
    if proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = "unknown"
        raise IsolatedFailure(f"the parser crashed (signal {-proc.returncode}, {sig})")
    try:
        status, value = pickle.loads(proc.stdout)
    except Exception:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise IsolatedFailure(
            f"the parser process failed (exit {proc.returncode}: {tail[0][:200]})"
        ) from None
    if status == "ok":
        return value
    raise IsolatedError(*value)


def reduce_error(exc: BaseException) -> Any:
    """What of an exception crosses back: a located error's (message, path, line, col)."""
    error = getattr(exc, "error", None)
    if error is not None:
        return (error.message, error.path, error.line, getattr(error, "col", None))
    return str(exc)[:500]


def _child() -> None:
    module, name, arg = pickle.loads(sys.stdin.buffer.read())
    try:
        result = ("ok", getattr(importlib.import_module(module), name)(arg))
    except Exception as exc:
        result = ("error", (type(exc).__name__, reduce_error(exc)))
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
