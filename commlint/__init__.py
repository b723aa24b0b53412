"""commlint: catch communication deadlocks and hangs in distributed PyTorch programs.

Python API for plan gates::

    import commlint
    trace = commlint.load("plan.yaml")            # or build a commlint.Trace in code
    result = commlint.check(trace, model="nccl")   # -> TraceCheck(findings, outcomes)

The names below are imported on first use (PEP 562), so that `commlint check`, which needs
the linter and the report formats only, never pays for the checker and the plan importers.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commlint._version import __version__

if TYPE_CHECKING:
    from commlint.findings import CommlintInputError, Finding, Report
    from commlint.graph.check import TraceCheck
    from commlint.trace import Action, Trace

# name -> the module that defines it
_LAZY = {
    "Action": "commlint.trace",
    "Trace": "commlint.trace",
    "CommlintInputError": "commlint.findings",
    "Finding": "commlint.findings",
    "Report": "commlint.findings",
    "TraceCheck": "commlint.graph.check",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'commlint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def load(path: str | Path) -> Trace:
    """Read and validate a trace / plan file (raises CommlintInputError, located)."""
    from commlint.plans.io import load_trace

    return load_trace(path).trace


def generate(**spec: object) -> Trace:
    """Expand a parallel configuration (the `generate:` block's keys) into a Trace."""
    from commlint.plans.generate import generate as _generate

    return _generate(**spec)  # type: ignore[arg-type]


def check(
    trace: Trace,
    model: str | list[str] | None = "gloo",
    max_cycles: int = 32,
    symmetry: bool | str = True,
) -> TraceCheck:
    """Check a trace; `model` is gloo, nccl, single-queue, all, a list, or None (backend's).

    `symmetry`: how a generated plan's symmetry is used (`commlint.graph.symmetry`): True
    checks one rank per orbit and recomputes findings on every rank when there are any;
    "orbits" reports the representatives' findings as they are (fastest rejection); False
    checks every rank."""
    from commlint.graph.check import check_trace

    result = check_trace(trace, model, max_cycles=max_cycles, symmetry=symmetry)
    if isinstance(trace.meta.get("flight_recorder"), dict):
        # What the dump reader found itself (buffers that completed but disagree, outputs,
        # all_to_all totals), and every finding at the source line the dumps name: as
        # `commlint plan` reports them, so the API never passes what the command flags.
        from commlint.plans.importers.flight_recorder import finish_findings

        finish_findings(trace, result.findings)
    return result


__all__ = [
    "Action",
    "CommlintInputError",
    "Finding",
    "Report",
    "Trace",
    "TraceCheck",
    "__version__",
    "check",
    "generate",
    "load",
]
