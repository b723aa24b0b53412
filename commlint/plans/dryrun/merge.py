"""Merge per-rank trace files of one dry-run (`commlint run --ranks … --save-trace DIR`).

Each saved file holds some ranks of one job and says so (`meta.partial: true`,
`meta.recorded_ranks`). Files of the same program, arguments and world size are one job:
`commlint plan DIR` checks them together. No torch here.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from commlint.findings import CommlintInputError, Finding, InputError, Location, Report
from commlint.trace import COLLECTIVE_OPS, Trace

_MISMATCHES = frozenset({"CL203", "CL204"})
_SHOWN_FOLLOW_ONS = 8  # sites listed under the root cause; the message has the count


def rank_spec(ranks: list[int]) -> str:
    """Ranks as `--ranks` takes them: `[0, 1, 2, 5]` → `0-2,5`."""
    out, i, rs = [], 0, sorted(ranks)
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def split_site(site: str | None) -> tuple[str | None, int | None]:
    """`path:line` → (path, line); the line is None when it is not a number, both are None
    when there is no `:`."""
    if not site or ":" not in site:
        return None, None
    path, _, line = site.rpartition(":")
    return path, int(line) if line.isdigit() else None


def job_key(trace: Trace) -> tuple | None:
    """What makes partial traces parts of one job; None for a complete trace."""
    if not trace.meta.get("partial"):
        return None
    return (
        trace.source,
        trace.world_size,
        str(trace.meta.get("program")),
        str(trace.meta.get("args")),
    )


def merge_partial(traces: list[tuple[str, Trace]]) -> Trace:
    """One trace from the parts of one job; raises when two parts record the same rank or
    disagree on a group's members."""
    first = traces[0][1]
    merged = Trace(
        world_size=first.world_size,
        backend=first.backend,
        source=first.source,
        meta={
            k: v
            for k, v in first.meta.items()
            if k not in ("partial", "recorded_ranks", "group_creations", "steering")
        },
    )
    owner: dict[int, str] = {}
    for path, t in traces:
        for name, members in t.groups.items():
            known = merged.groups.setdefault(name, members)
            if known != members:
                raise CommlintInputError(
                    f"group '{name}' is {members} here but {known} in another part of this job",
                    path,
                )
        for rank in set(t.ranks) | set(t.ends):
            if rank in owner:
                raise CommlintInputError(
                    f"rank {rank} is recorded both here and in {owner[rank]}", path
                )
            owner[rank] = path
        merged.ranks.update(t.ranks)
        merged.ends.update(t.ends)
        creations = t.meta.get("group_creations")
        if isinstance(creations, dict):
            merged.meta.setdefault("group_creations", {}).update(creations)  # type: ignore[union-attr]
        steering = t.meta.get("steering")
        if isinstance(steering, list):  # each part's own ranks' CL211 evidence
            merged.meta.setdefault("steering", []).extend(steering)  # type: ignore[union-attr]
    missing = [r for r in range(merged.world_size) if r not in owner]
    if missing:
        merged.meta["missing_ranks"] = missing
    return merged


def check_parts(parts: list[tuple[str, Trace]], args: Any, report: Report) -> None:
    """Check the per-rank files of one dry-run as one job (used by `commlint plan`)."""
    from commlint.graph.align import explain
    from commlint.graph.check import check_trace

    paths = [p for p, _ in parts]
    where = os.path.commonpath(paths) if len(paths) > 1 else paths[0]
    modes: dict[str, str] = {}
    for path, t in parts:
        modes.setdefault(str(t.meta.get("tensors", "fake")), path)
    if len(modes) > 1:
        # Fake and real tensors take different paths through the same program (a value read,
        # a fallback): parts of both are two different runs, not one job.
        shown = ", ".join(f"{mode} ({path})" for mode, path in sorted(modes.items()))
        report.errors.append(
            InputError(
                path=where,
                message=f"the parts of this dry-run were recorded with different tensor "
                f"modes: {shown}; record every part again with the same --tensors "
                "(--tensors real when one part needed real values)",
            )
        )
        return
    try:
        trace = merge_partial(parts)
    except CommlintInputError as exc:
        report.errors.append(exc.error)
        return
    missing = trace.meta.get("missing_ranks")
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (" …" if len(missing) > 8 else "")
        report.errors.append(
            InputError(
                path=where,
                message=f"dry-run traces of ranks {shown} are missing ({len(missing)} of "
                f"{trace.world_size}); record them before checking the job",
            )
        )
        return
    result = check_trace(trace, args.model, where, None, args.max_cycles)
    for f in result.findings:
        locate_at_site(f, trace)
    explain(result.findings, trace)
    report.findings.extend(fold_follow_ons(result.findings, trace))
    report.checked += 1
    for path, t in parts:
        for rank, stop in sorted(dict(t.meta.get("incomplete") or {}).items()):
            site_path, line = split_site(stop.get("site"))
            report.errors.append(
                InputError(
                    path=site_path or path,
                    line=line,
                    message=f"rank {rank} did not reach the end of its program ({path}): "
                    f"{stop.get('why')}; the verdict covers only what the ranks did before",
                )
            )


def locate_at_site(f: Finding, trace: Trace | None = None) -> None:
    """Point a finding at the user's source line (its first action's call site) — or, given
    the trace, at the call only its rank made (`_diverged_at`) when the action sits in code
    every rank ran: rank 0's extra `step()` whose collective is inside `step`."""
    for loc in f.actions:
        path, line = split_site(loc.site)
        if line is not None:
            f.path, f.line = path, line
            break
    else:
        return
    outer = _diverged_at(trace, f.actions[0]) if trace is not None else None
    if outer is None:
        return
    site, frame = outer
    path, line = split_site(site)
    if line is None:
        return
    first = f.actions[0]
    f.related.insert(
        0,
        Location(
            path=f.path,
            line=f.line,
            rank=first.rank,
            site=first.site,
            message=f"rank {first.rank} waits here, reached through {site} ({frame}), a call "
            "no other rank made",
        ),
    )
    f.path, f.line = path, line


def _diverged_at(trace: Trace, loc: Location) -> tuple[str, str] | None:
    """(site, frame) of the call where the finding's rank left the code the others ran: the
    outermost frame of its action's stack that no other rank's action passed through, just
    outside a frame they did pass through (the same function, called from another line)."""
    if loc.rank is None or loc.action is None or loc.site is None:
        return None
    actions = trace.ranks.get(loc.rank, [])
    if not 0 <= loc.action < len(actions):
        return None
    stack = actions[loc.action].stack or []
    mine = [e for e in stack if e.startswith(loc.site + " in ")]
    if not mine:
        return None
    frames = stack[stack.index(mine[0]) :]  # the action's own frame outward
    reached = {
        e
        for rank, others in trace.ranks.items()
        if rank != loc.rank
        for a in others
        for e in a.stack or []
    }
    found = None
    for inner, outer in itertools.pairwise(frames):
        if inner in reached and outer not in reached:
            found = outer
    if found is None:
        return None
    site, _, frame = found.partition(" in ")
    return site, f"in {frame}"


def _collective_seq(trace: Trace, loc: Location) -> tuple[str, int] | None:
    """(group, 1-based sequence number on it) of the collective a finding points at."""
    if loc.rank is None or loc.action is None:
        return None
    actions = trace.ranks.get(loc.rank, [])
    if not 0 <= loc.action < len(actions):
        return None
    group = actions[loc.action].group
    seq = sum(1 for a in actions[: loc.action + 1] if a.op in COLLECTIVE_OPS and a.group == group)
    return group, seq


def fold_follow_ons(findings: list[Finding], trace: Trace) -> list[Finding]:
    """One root cause per divergence: once the collectives of a group mismatch (a rank issued
    one more, or another one), every later collective on that group pairs with the wrong
    partner and mismatches too. Those follow-ons — later CL203/CL204 on the same group among
    the same ranks — are folded under the first one, with their count and sites."""
    keyed = []
    for f in findings:
        mismatch = f.code in _MISMATCHES and f.actions
        keyed.append((_collective_seq(trace, f.actions[0]) if mismatch else None, f))
    roots: dict[str, tuple[int, Finding]] = {}
    folded: dict[int, list[tuple[int, Finding]]] = {}
    for where, f in sorted((k for k in keyed if k[0]), key=lambda k: k[0][1]):
        group, seq = where
        root = roots.get(group)
        if root is not None and set(f.ranks) <= set(root[1].ranks):
            folded.setdefault(id(root[1]), []).append((seq, f))
        else:
            roots[group] = (seq, f)
    dropped = {id(f) for follow in folded.values() for _, f in follow}
    out = []
    for f in findings:
        if id(f) in dropped:
            continue
        follow = folded.get(id(f))
        if follow:
            n = len(follow)
            first, last = follow[0][0], follow[-1][0]
            span = f"#{first}" if n == 1 else f"#{first}–#{last}"
            group = _collective_seq(trace, f.actions[0])[0]  # type: ignore[index]
            f.message += (
                f" Every later collective on group '{group}' pairs with the wrong partner: "
                f"{n} follow-on mismatch{'es' if n != 1 else ''} ({span}) caused by this one "
                f"{'are' if n != 1 else 'is'} folded here; fix this one first."
            )
            for _, g in follow[:_SHOWN_FOLLOW_ONS]:
                loc = g.actions[0]
                path, line = split_site(loc.site)
                f.related.append(
                    Location(
                        path=path,
                        line=line,
                        rank=loc.rank,
                        action=loc.action,
                        site=loc.site,
                        message=f"follow-on: {g.message.split('. ')[0]}",
                    )
                )
        out.append(f)
    return out
