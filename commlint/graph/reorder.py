"""Potential deadlocks under reordering (CL209): see docs/nondeterminism.md."""

from __future__ import annotations

from commlint.findings import Finding
from commlint.trace import Trace


def potential_deadlocks(
    trace: Trace, models: list[str], outcomes: dict, path: str | None = None, lines=None
) -> list[Finding]:
    return []
