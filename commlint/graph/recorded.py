"""The checker in the trace's recorded order: compile, simulate and judge a trace under each
queue model, merge the findings, and use a generated plan's symmetry when it has one.

`commlint.graph.check` adds the search for deadlocks under legal reorderings (CL209) on top;
`commlint.graph.reorder` confirms each reordering it finds with this checker, so the two sit
one above the other instead of importing each other."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from commlint.findings import Finding
from commlint.gc_pause import paused_gc
from commlint.graph.compile import MODELS, compile_trace
from commlint.graph.simulate import simulate
from commlint.graph.symmetry import quotient
from commlint.graph.verdict import RankOutcome, verdict
from commlint.trace import Trace


@dataclass
class TraceCheck:
    """Findings of one trace, and what every rank does under each model checked."""

    findings: list[Finding] = field(default_factory=list)
    outcomes: dict[str, dict[int, RankOutcome]] = field(default_factory=dict)

    def blocked(self, model: str = "gloo") -> list[int]:
        return [r for r, o in self.outcomes[model].items() if o.status == "blocked"]


def resolve_models(model: str | Iterable[str] | None, trace: Trace | None = None) -> list[str]:
    """`all` → every model; None → the model of the trace's backend (gloo by default)."""
    if model is None:
        backend = (trace.backend or "") if trace is not None else ""
        return ["nccl"] if "nccl" in backend else ["gloo"]
    names = [model] if isinstance(model, str) else list(model)
    out: list[str] = []
    for name in names:
        for m in MODELS if name == "all" else [name]:
            if m not in MODELS:
                raise ValueError(
                    f"unknown queue model {m!r}; expected gloo, nccl, single-queue or all"
                )
            if m not in out:
                out.append(m)
    return out


def _identity(f: Finding) -> tuple:
    return (f.code, f.message, tuple((a.rank, a.action) for a in f.actions))


def check_symmetry_argument(symmetry: bool | str) -> None:
    if symmetry not in (True, False, "orbits"):
        raise ValueError(f"symmetry must be True, False or 'orbits', not {symmetry!r}")


def on_orbits(
    trace: Trace, check: Callable[[Trace], TraceCheck], symmetry: bool | str
) -> TraceCheck | None:
    """`check` run on one rank per orbit of a symmetric trace, when that is the answer.

    None when the trace has no valid symmetry certificate, or when the quotient has findings
    and `symmetry` is True (they are recomputed on the whole trace so they name every rank)."""
    cut = quotient(trace)
    if cut is None:
        return None
    small, cert = cut
    sub = check(small)
    if sub.findings and symmetry != "orbits":
        return None
    rep_of = cert.rep_of
    for m, outs in sub.outcomes.items():
        sub.outcomes[m] = {r: outs[rep_of[r]] for r in range(trace.world_size)}
    copies = trace.world_size // len(cert.reps)
    for f in sub.findings:
        f.message += (
            f" [checked on one rank per orbit: the plan is symmetric along "
            f"{', '.join(cert.axes)}, so the same holds for each of the {copies} "
            "symmetric copies of these ranks]"
        )
    return sub


def check_recorded(
    trace: Trace,
    model: str | Iterable[str] | None = "gloo",
    path: str | None = None,
    lines=None,
    max_cycles: int = 32,
    symmetry: bool | str = True,
) -> TraceCheck:
    """`commlint.graph.check.check_trace` without the reordering search (`reorder=False`)."""
    check_symmetry_argument(symmetry)
    if symmetry:
        sub = on_orbits(
            trace,
            lambda small: check_recorded(small, model, path, lines, max_cycles, symmetry=False),
            symmetry,
        )
        if sub is not None:
            return sub
    result = TraceCheck()
    merged: dict[tuple, Finding] = {}
    models = resolve_models(model, trace)
    for m in models:
        with paused_gc():
            g = compile_trace(trace, m)
            state = simulate(g)
        v = verdict(g, state, path, lines, max_cycles)
        result.outcomes[m] = v.outcomes
        for f in v.findings:
            key = _identity(f)
            if key in merged:
                merged[key].models.append(m)
            else:
                f.models = [m]
                merged[key] = f
    for f in merged.values():
        if len(models) > 1 and len(f.models) < len(models):
            f.message += f" [only under: {', '.join(f.models)}]"
        result.findings.append(f)
    if "group_creations" in trace.meta:
        from commlint.graph.group_names import group_name_findings

        result.findings.extend(group_name_findings(trace))
    if "steering" in trace.meta:
        from commlint.graph.steering import steering_findings

        result.findings.extend(steering_findings(trace))
    return result
