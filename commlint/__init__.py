"""commlint: catch communication deadlocks and hangs in distributed PyTorch programs.

Python API for plan gates::

    import commlint
    trace = commlint.load("plan.yaml")            # or build a commlint.Trace in code
    result = commlint.check(trace, model="nccl")   # -> TraceCheck(findings, outcomes)
"""

from __future__ import annotations

from pathlib import Path

from commlint.findings import CommlintInputError, Finding, Report
from commlint.graph.check import TraceCheck, check_trace
from commlint.plans.io import load_trace
from commlint.trace import Action, Trace

__version__ = "0.1.0"


def load(path: str | Path) -> Trace:
    """Read and validate a trace / plan file (raises CommlintInputError, located)."""
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
    return check_trace(trace, model, max_cycles=max_cycles, symmetry=symmetry)


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
