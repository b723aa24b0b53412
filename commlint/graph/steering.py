"""Rank-local values that decide what a rank communicates (CL211).

When fake tensors do not compute a number the program tests (`if loss.item() > 10:`) and a
real re-run is over the dry-run's budget, the dry-run takes the outcome the placeholder gives,
the same on every rank, and records the first rank that made each test again with the other
outcome (`driver._explore`). When the two runs communicate differently and the value is
rank-local (computed from this rank's own data, not from a collective's result), ranks whose
values fall on different sides of the test make different calls: a hang or a mismatch the
first time they do. The dry-run writes what it found to `meta.steering` (a list of
`{rank, read, test, taken, then, then_site, otherwise, otherwise_site, index}`); the checker
turns each into a CL211 finding — the run-time counterpart of the linter's CL102.
"""

from __future__ import annotations

from commlint.findings import Finding, Location
from commlint.graph.group_names import site_location
from commlint.trace import Trace

_FIX = (
    "Agree on the value before it decides: all_reduce it (op=MAX/MIN, or a flag) or "
    "broadcast it from one rank, then test the agreed value; or move the communication out "
    "of the branch so every rank makes it."
)


def steering_findings(trace: Trace) -> list[Finding]:
    """CL211: one finding per entry of `meta.steering` (malformed entries are skipped)."""
    from commlint.rules import rule_of

    entries = trace.meta.get("steering")
    if not isinstance(entries, list):
        return []
    name = rule_of("CL211").name
    findings = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("rank"), int):
            continue
        rank, test = e["rank"], e.get("test")
        read = e.get("read") or test
        taken = bool(e.get("taken"))
        path, line = site_location(test)
        then_at = f" at {e['then_site']}" if e.get("then_site") else ""
        other_at = f" at {e['otherwise_site']}" if e.get("otherwise_site") else ""
        message = (
            f"a rank-local value read at {read} decides what rank {rank} communicates at "
            f"{e.get('then_site') or e.get('otherwise_site') or test}: when the test at {test} "
            f"is {taken}, rank {rank} calls {e.get('then', '?')}{then_at}; when it is "
            f"{not taken}, {e.get('otherwise', '?')}{other_at}. Ranks whose values fall on "
            "different sides hang or mismatch there"
        )
        related = [
            Location(path=p, line=ln, rank=rank, site=site, message=what)
            for site, what in (
                (e.get("read"), "the value is read here (a fake tensor: not computed)"),
                (e.get("then_site"), f"if {taken}: {e.get('then', '?')}"),
                (e.get("otherwise_site"), f"if {not taken}: {e.get('otherwise', '?')}"),
            )
            if site
            for p, ln in [site_location(site)]
        ]
        findings.append(
            Finding(
                code="CL211",
                name=name,
                severity="error",
                message=message,
                path=path,
                line=line,
                col=1 if line is not None else None,
                ranks=[rank],
                related=related,
                fix=_FIX,
            )
        )
    return findings
