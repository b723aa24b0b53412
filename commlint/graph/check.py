"""Check a trace under one or more queue models and merge the findings: the recorded order
(`commlint.graph.recorded`), then every legal reordering of it (`commlint.graph.reorder`)."""

from __future__ import annotations

from collections.abc import Iterable

from commlint.graph.recorded import (
    TraceCheck,
    check_recorded,
    check_symmetry_argument,
    on_orbits,
    resolve_models,
)
from commlint.trace import Trace


def check_trace(
    trace: Trace,
    model: str | Iterable[str] | None = "gloo",
    path: str | None = None,
    lines=None,
    max_cycles: int = 32,
    reorder: bool = True,
    symmetry: bool | str = True,
) -> TraceCheck:
    """Run the checker on a validated trace. `model` may be a name, a list, `all` or None.

    `reorder`: also look for deadlocks under legal reorderings of the trace (CL209).
    `symmetry`: a generated trace that carries a valid symmetry certificate is checked on one
    rank per orbit first (exact: see `commlint.graph.symmetry`). `True`: a clean result there
    is the answer, findings are recomputed on the whole trace so they name every rank.
    `"orbits"`: the quotient's findings are the answer too (each names the representative
    ranks and says how many symmetric copies it stands for) — a plan search loop rejects a
    broken 1,024-rank plan in milliseconds. `False`: always the whole trace."""
    if not reorder:
        return check_recorded(trace, model, path, lines, max_cycles, symmetry)
    check_symmetry_argument(symmetry)
    if symmetry:
        sub = on_orbits(
            trace,
            lambda small: check_trace(small, model, path, lines, max_cycles, symmetry=False),
            symmetry,
        )
        if sub is not None:
            return sub
    result = check_recorded(trace, model, path, lines, max_cycles, symmetry=False)
    from commlint.graph.reorder import potential_deadlocks  # only when asked: it is large

    models = resolve_models(model, trace)
    result.findings.extend(potential_deadlocks(trace, models, result.outcomes, path, lines))
    return result


__all__ = ["TraceCheck", "check_trace", "resolve_models"]
