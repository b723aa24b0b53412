"""What every importer does last: the same structural checks a plan file gets."""

from __future__ import annotations

from commlint.findings import CommlintInputError
from commlint.plans.io import action_ref, semantic_errors
from commlint.trace import Trace


def validated(trace: Trace, path: str | None, where: dict[int, str] | None = None) -> Trace:
    """Raise a located `CommlintInputError` for the first structural problem (a send to
    itself, an undefined group, a peer outside the world…); `where` names each rank's file."""
    for rank, index, msg in semantic_errors(trace):
        prefix = action_ref(trace, rank, index, site=True)
        source = (where or {}).get(rank, path) if rank is not None else path
        raise CommlintInputError(f"{prefix}: {msg}" if prefix else msg, source)
    return trace
