"""Check a symmetric plan on one rank per orbit.

Generated plans are highly symmetric: in a tp=8 × pp=8 × dp=16 plan the 8 ranks of a tensor-
parallel group, and the 16 data-parallel replicas, run the same program up to a renaming of
ranks and groups. Checking all 1,024 ranks repeats the same work 128 times.

**The certificate.** The generator (`commlint.plans.generate`) proves, for each layout axis
`a` it can, that the shift `γ_a` (rank coordinate `a` + 1, cyclically) is an automorphism of
the trace: `trace[γ r] = γ(trace[r])` for every rank `r`, where `γ` maps each peer `p` to
`γ p` and each group `g` to a group `φ(g)` whose members are `γ(members of g)` (`φ` a
bijection of group names). Collectives in generated plans carry no root and no per-member
split sizes, so only group identity and peers can change under `γ`. `Γ` is the group the
proven shifts generate (they commute and act freely). The *representatives* `Q` are the
ranks whose coordinate is 0 on every proven axis; `ρ(m)` is `m` with those coordinates
zeroed, and `γ_m` the shift that takes `ρ(m)` to `m`. The certificate also records:

1. every group a representative calls is fixed by `γ_m` for each of its members `m`
   (checked axis by axis: `φ_a(g) = g` for every proven axis along which `g`'s members
   differ), and
2. every point-to-point peer of a representative is itself a representative.

**Why checking `Q` alone is exact.** The checker's outcome is the unique maximal progress
of a monotone system: which ops complete does not depend on the order events are processed
in. An automorphism therefore maps outcomes to outcomes: rank `γ r` gets exactly as far as
`r`. By (1), member `m` of a group `g` that a representative calls issues its `k`-th call
on `g` at the same position as `ρ(m)` issues its own `k`-th call on `g` (`trace[m]` is
`γ_m(trace[ρ(m)])` and `γ_m` fixes `g`), so that collective completes exactly when the
representatives among `g`'s members reach it — which is what the quotient trace, with each
group cut down to its representatives, decides. By (2), and because `Γ` acts freely, no
channel joins a representative to a non-representative, so point-to-point matching among
representatives is unchanged. Local things (queues per model, waits, syncs, handles) live
on one rank's list, which the quotient keeps as it is; op/size/dtype agreement among the
members of a collective holds across an orbit because their calls are images of one call.

**When it is not used.** The certificate also keeps every rank's action list as generated;
if the trace has been edited since (an action replaced, a list or a group changed), the
certificate no longer holds and the whole trace is checked. It is also skipped when any op
floats (`bucket`/`thread`: CL209 may choose different orders on symmetric ranks) or a
collective is issued on `WORLD`. And only a *clean* quotient is taken as the answer: when
the quotient has any finding, the whole trace is checked, so findings always name every
rank and cycle exactly as a full check does; the shortcut never changes a report.

Measured (bench/plans.py): the 1,024-rank plan is checked on 8 representatives.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlint.trace import COLLECTIVE_OPS, WORLD, Trace


@dataclass
class Symmetry:
    """A generator's proof that a trace is symmetric along some layout axes."""

    axes: list[str]  # the proven axes, e.g. ["tp", "dp_replicate"]
    reps: list[int]  # one representative per orbit, ascending
    rep_of: list[int]  # rank -> its representative
    world_size: int
    # every rank's actions as generated (kept alive: ids stay valid); None for a rank the
    # generator builds on first access (commlint.plans.lazy) that was never built
    saved: dict[int, tuple | None]
    groups: dict[str, list[int]]  # the groups as generated

    def holds_for(self, trace: Trace) -> bool:
        """Is `trace` still exactly the trace this certificate was made for?"""
        if trace.world_size != self.world_size or trace.ends or trace.groups != self.groups:
            return False
        ranks = trace.ranks
        if ranks.keys() != self.saved.keys():
            return False
        # A rank never built is as generated, but only the generator's own mapping (whose
        # `generated` is `saved`) can vouch for that; any other mapping is compared in full.
        own = getattr(ranks, "generated", None) is self.saved
        # tuples compare item by identity first: an unchanged trace costs one C-level pass
        return all(
            own if acts is None else tuple(ranks[r]) == acts for r, acts in self.saved.items()
        )


def attach(trace: Trace, symmetry: Symmetry | None) -> None:
    trace._symmetry = symmetry


def certificate(trace: Trace) -> Symmetry | None:
    """The trace's symmetry certificate if it still holds, else None."""
    cert = trace._symmetry
    if not isinstance(cert, Symmetry) or not cert.holds_for(trace):
        return None
    return cert


def quotient(trace: Trace) -> tuple[Trace, Symmetry] | None:
    """The trace cut down to one representative per orbit, or None when no valid
    certificate exists or the shortcut does not apply (see the module docstring)."""
    cert = certificate(trace)
    if cert is None or len(cert.reps) == trace.world_size:
        return None
    reps = set(cert.reps)
    ranks = {q: trace.ranks[q] for q in cert.reps if q in trace.ranks}
    for acts in ranks.values():
        for a in acts:
            if a.bucket is not None or a.thread is not None:
                return None
            if a.group == WORLD and a.op in COLLECTIVE_OPS:
                return None
    groups = {name: [m for m in members if m in reps] for name, members in trace.groups.items()}
    q = Trace.model_construct(
        version=1,
        world_size=trace.world_size,
        groups=groups,
        ranks=ranks,
        ends={},
        backend=trace.backend,
        source=trace.source,
        meta=trace.meta,
    )
    return q, cert


__all__ = ["Symmetry", "attach", "certificate", "quotient"]
