"""From the ranks' rings to a `Trace`, through the commlint checker, to a verdict.

Rings are bounded, so each rank holds a different stretch of history. The checker matches the
i-th collective of a group across members and the i-th send with the i-th receive of a
channel, so the rings are cut per stream (a group's collectives; one p2p channel) at the
first call every participant still holds: what is dropped was issued by all of them long
ago, and what is kept lines up call for call. The checker then runs the combined trace
forward from there, exactly as it runs a dry-run's trace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from commlint.findings import Finding
from commlint.trace import WORLD, Action, RankEnd, Trace

STALL_CODES = ("CL201", "CL202", "CL203", "CL204", "CL210")
ACTION_FIELDS = (
    "op",
    "group",
    "peer",
    "root",
    "tag",
    "async",
    "handle",
    "batch",
    "shape",
    "dtype",
    "reduce_op",
    "in_splits",
    "out_splits",
    "site",
    "stack",
    "via",
    "label",
    "thread",
)


@dataclass
class Diagnosis:
    """The combined trace, the checker's findings, and which of them prove a hang."""

    trace: Trace
    findings: list[Finding]
    hang: list[Finding] = field(default_factory=list)
    pending: set[tuple[int, int]] = field(default_factory=set)


def _participants(key: str, groups: dict[str, list[int]], world_size: int) -> list[int]:
    kind, rest = key.split(":", 1)
    if kind == "coll":
        return groups.get(rest, list(range(world_size)))
    _group, pair, _tag = rest.rsplit(":", 2)
    src, dst = pair.split(">")
    return [int(src), int(dst)] if src != "None" and dst != "None" else []


def build_trace(states: dict[int, dict[str, Any]], world_size: int, backend: str = "") -> tuple:
    """`states[r]`: rank r's snapshot (`Ring.snapshot` plus `status` and `groups`), or a dict
    with only `status: dead`. Returns (trace, pending) where pending holds the (rank, index)
    of every kept action that had not completed."""
    groups: dict[str, list[int]] = {}
    for s in states.values():
        for name, members in (s.get("groups") or {}).items():
            if name != WORLD:
                groups[name] = list(members)
    oldest: dict[int, dict[str, int]] = {}
    for r, s in states.items():
        if "entries" not in s:
            continue
        first: dict[str, int] = {}
        for e in s["entries"]:
            if _created(e):
                continue
            if "key" in e and e["key"] not in first:
                first[e["key"]] = e["seq"]
        for k, n in s.get("next_seq", {}).items():
            if not k.startswith("create:"):
                first.setdefault(k, n)
        oldest[r] = first
    frontier: dict[int, dict[str, int]] = {}
    for r, s in states.items():
        if "entries" not in s:
            continue
        front = {k: n for k, n in s.get("next_seq", {}).items() if not k.startswith("create:")}
        for e in s["entries"]:
            if "key" in e and e.get("state") != "done" and not _created(e):
                front[e["key"]] = min(front.get(e["key"], e["seq"]), e["seq"])
        frontier[r] = front
    keys = {k for first in oldest.values() for k in first}
    cut: dict[str, int] = {}
    for k in keys:
        everyone = _participants(k, groups, world_size)
        parts = [p for p in everyone if p in oldest]
        cut[k] = max((oldest[p].get(k, 0) for p in parts), default=0)
        if len(parts) < len(everyone):
            # A participant's ring is unknown (the process died): what the others completed
            # tells nothing about it; keep only what they have not completed.
            cut[k] = max(cut[k], min(frontier[p].get(k, 0) for p in parts))

    trace = Trace(world_size=world_size, groups=groups, backend=backend or None, source="guard")
    pending: set[tuple[int, int]] = set()
    for r in range(world_size):
        s = states.get(r, {"status": "dead"})
        actions: list[Action] = []
        kept_handles: set[str] = set()
        for e in s.get("entries", []):
            if _created(e):
                creating = _creating(e, r, trace)
                if creating is not None:
                    pending.add((r, len(actions)))
                    actions.append(creating)
                continue
            if e.get("nonmember"):
                continue
            if e["op"] == "wait":
                handles = [h for h in e.get("handles", []) if h in kept_handles]
                if not handles:
                    continue
                data = {"op": "wait", "handles": handles}
                if e.get("site"):
                    data["site"] = e["site"]
            else:
                if "key" in e and e["seq"] < cut.get(e["key"], 0):
                    continue
                if e["op"] in ("send", "recv", "isend", "irecv") and e.get("peer") is None:
                    continue  # a receive from any source: its peer is not known yet
                data = {f: e[f] for f in ACTION_FIELDS if e.get(f) is not None}
                if e.get("handle"):
                    kept_handles.add(e["handle"])
            if e.get("state") != "done":
                pending.add((r, len(actions)))
            actions.append(Action.model_validate(data))
        trace.ranks[r] = actions
        end = _end_of(s)
        if end is not None:
            trace.ends[r] = end
    return trace, pending


def _created(e: dict[str, Any]) -> bool:
    """A group creation (`commlint.guard.groups`): checked when made, not a trace action."""
    return str(e.get("key", "")).startswith("create:")


def _creating(e: dict[str, Any], rank: int, trace: Trace) -> Action | None:
    """A `new_group` this rank is still inside: it waits there for the new group's members,
    as in a barrier among them (a group of its own in the trace); a finished creation, or one
    whose members are not known, is no action."""
    members = e.get("members")
    if e.get("state") == "done" or not members or rank not in members:
        return None
    name = "new_group" + json.dumps(members, separators=(",", ":"))
    trace.groups[name] = list(members)
    data = {"op": "barrier", "group": name, "label": e.get("label")}
    if e.get("site"):
        data["site"] = e["site"]
    return Action.model_validate(data)


def _end_of(s: dict[str, Any]) -> RankEnd | None:
    status = s.get("status")
    if status == "running":
        return RankEnd(
            kind="timeout",
            message="it is still running outside any communication call; it may get there",
        )
    if status == "stopped":
        return RankEnd(kind="timeout", message=s.get("why") or "its process is stopped")
    if status == "dead":
        return RankEnd(
            kind="exit",
            message=s.get("why") or "exited without recording how (no heartbeat, no exit)",
        )
    end = s.get("end")
    if end and end.get("kind") in ("exception", "exit"):
        return RankEnd(kind=end["kind"], message=end.get("message"), site=end.get("site"))
    return None


def diagnose(states: dict[int, dict[str, Any]], world_size: int, backend: str = "") -> Diagnosis:
    """Check the combined rings; `hang` lists the findings that prove no rank can move on.

    A finding counts only if it involves a call that has not completed (an old, silently
    paired mismatch is no reason to stop a job now), and a wait on a rank that is still
    running (not blocked in a call) does not count: that rank may be slow, not stuck."""
    from commlint.graph.check import check_trace

    trace, pending = build_trace(states, world_size, backend)
    model = "nccl" if "nccl" in backend else "gloo"
    result = check_trace(trace, model, reorder=False, symmetry=False)
    running = {r for r, s in states.items() if s.get("status") in ("running", "stopped")}
    hang = []
    for f in result.findings:
        if f.severity != "error" or f.code not in STALL_CODES:
            continue
        if not any((a.rank, a.action) in pending for a in f.actions):
            continue
        if f.code in ("CL202", "CL210"):
            targets = {loc.rank for loc in f.related if loc.rank is not None}
            if targets & running:
                continue
        hang.append(f)
    from commlint.graph.align import explain

    explain(hang, trace)  # at the user's line, once the hang is proven on the checker's words
    return Diagnosis(trace, result.findings, hang, pending)


def format_report(
    d: Diagnosis, states: dict[int, dict[str, Any]], timeout: float, after: float | None = None
) -> str:
    when = f" {after:.1f} s after the first call blocked" if after is not None else ""
    lines = [
        f"commlint guard: hang diagnosed{when} (a call blocked for more than {timeout:g} s and "
        "the checker proves no rank can move on):"
    ]
    for f in d.hang:
        lines.append(f"  {f.code} {f.name}: {f.message}")
        if f.fix:
            lines.append(f"    fix: {f.fix}")
    lines.append("  ranks:")
    for r in range(d.trace.world_size):
        lines.append(f"    rank {r}: {_rank_line(states.get(r, {'status': 'dead'}))}")
    return "\n".join(lines)


def stall_report(
    states: dict[int, dict[str, Any]],
    timeout: float,
    after: float,
    next_in: float | None,
    killed: bool,
) -> str:
    """A stall no finding proves (a rank blocked, another still running, stopped or silent):
    what every rank is doing now — blocked in which call where, or running at which line."""
    blocked = sorted(r for r, s in states.items() if s.get("status") == "blocked")
    others = sorted(r for r, s in states.items() if s.get("status") in ("running", "stopped"))
    who = ", ".join(map(str, blocked))
    lines = [
        f"commlint guard: stall: rank{'s' if len(blocked) > 1 else ''} {who} blocked for more "
        f"than {timeout:g} s ({after:.1f} s since the first call blocked); no hang is proven "
        + (
            f"while rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} "
            "may yet get there. Each rank now:"
            if others
            else "yet. Each rank now:"
        )
    ]
    for r in sorted(states):
        lines.append(f"  rank {r}: {_rank_line(states[r])}")
        where = states[r].get("where") or []
        if states[r].get("status") == "running" and len(where) > 1:
            lines.extend(f"      called from {w}" for w in where[1:])
    if killed:
        lines.append("  the job is ended (--kill-stalled).")
    elif next_in is not None:
        lines.append(
            f"  next report in {next_in:g} s; pass --kill-stalled to end a stalled job instead."
        )
    return "\n".join(lines)


def _rank_line(s: dict[str, Any]) -> str:
    status = s.get("status")
    if status == "blocked":
        e = s.get("inflight") or {}
        what = _describe(e)
        return f"blocked {s.get('blocked_for', 0):.1f} s in {what}"
    if status == "running":
        where = s.get("where") or []
        at = f" at {where[0]}" if where else ""
        return s.get("why") or f"running{at} (not in a communication call)"
    if status in ("dead", "stopped"):
        return s.get("why") or "gone (no heartbeat)"
    end = s.get("end") or {}
    kind = end.get("kind", "finished")
    at = f" at {end['site']}" if end.get("site") else ""
    msg = f": {end['message']}" if end.get("message") else ""
    return {"finished": "finished the program", "exit": "exited", "exception": "raised"}.get(
        kind, kind
    ) + f"{at}{msg}"


def _describe(e: dict[str, Any]) -> str:
    if not e:
        return "?"
    data = {f: e[f] for f in ACTION_FIELDS if e.get(f) is not None}
    if e.get("op") == "wait":
        data = {"op": "wait", "handles": e.get("handles", [])}
    try:
        text = Action.model_validate(data).describe()
    except Exception:  # not a trace action (a group creation): its own words
        text = str(e.get("label") or e.get("op"))
    return text + (f" @{e['site']}" if e.get("site") else "")


def _fields(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in ACTION_FIELDS and v is not None}


def _window(
    seq: int, seen: dict[int, dict[str, Any]], history: dict[int, list[dict[str, Any]]]
) -> int:
    """The first call of the window every rank's history covers (`seq` alone when one has a
    gap): the latest call all of them still hold."""
    first = max((h[0]["seq"] for h in history.values() if h), default=seq)
    if any(not h or h[-1].get("seq") != seq - 1 for r, h in history.items() if r in seen):
        first = seq  # a gap in some rank's history: compare the call itself only
    if set(history) != set(seen):
        first = seq
    return first


def mismatch_trace(
    group: str,
    members: list[int],
    seq: int,
    seen: dict[int, dict[str, Any]],
    world_size: int,
    history: dict[int, list[dict[str, Any]]] | None = None,
) -> Trace:
    """Each member's calls on the group from the window's first (`history`: each rank's
    earlier fingerprints on the group, oldest first) to the one that mismatches: what the
    checker and the aligner word, and what `commlint plan` finds again from a saved file."""
    history = history or {}
    first = _window(seq, seen, history)
    trace = Trace(
        world_size=world_size,
        groups={} if group == WORLD else {group: members},
        source="guard",
    )
    for r in range(world_size):
        fp = seen.get(r)
        if fp is None:
            trace.ranks[r] = []
            continue
        past = [h for h in history.get(r, []) if first <= h.get("seq", -1) < seq]
        trace.ranks[r] = [
            Action.model_validate({**_fields(h), "group": group}) for h in [*past, fp]
        ]
    return trace


def _fp_line(fp: dict[str, Any], group: str) -> str:
    """One rank's side of a mismatch: the call as the checker words it, and where."""
    try:
        text = Action.model_validate({**_fields(fp), "group": group}).describe()
    except Exception:
        text = str(fp.get("op"))
    for k in ("shape", "dtype"):
        if fp.get(k) is not None and str(fp[k]) not in text:
            text += f" {k} {fp[k]}"
    if fp.get("label") and fp["label"] != fp.get("op"):
        text += f" ({fp['label']})"
    return text + (f" @{fp['site']}" if fp.get("site") else "")


def mismatch_text(
    group: str,
    members: list[int],
    seq: int,
    seen: dict[int, dict[str, Any]],
    world_size: int,
    history: dict[int, list[dict[str, Any]]] | None = None,
) -> str:
    """The CL203/CL204 block for one collective whose members disagree: the checker's
    findings worded at the user's line (`commlint.graph.align`) from the calls just before
    it, a line per rank, the fix."""
    from commlint.graph.align import explain
    from commlint.graph.check import check_trace
    from commlint.rules import rule_of

    history = history or {}
    first = _window(seq, seen, history)
    trace = mismatch_trace(group, members, seq, seen, world_size, history)
    offset = seq - first
    result = check_trace(trace, "gloo", reorder=False, symmetry=False)
    found = [
        f
        for f in result.findings
        if f.code in ("CL203", "CL204") and f.actions and f.actions[0].action == offset
    ]
    heads: list[str] = []
    fixes: list[str] = []
    if found:
        explain(found, trace)
    for f in found:
        # the window's numbers are the job's, shifted by the calls before it
        msg = _NUMBER.sub(lambda m: f"#{int(m.group(1)) + first}{m.group(2)}", f.message)
        fix = _NUMBER.sub(lambda m: f"#{int(m.group(1)) + first}{m.group(2)}", f.fix or "")
        heads.append(f"{f.code} {f.name}: {msg}")
        if fix and fix not in fixes:
            fixes.append(fix)
    if not heads:
        # the checker tolerates what the fingerprints tell apart (a call it cannot size, such
        # as DDP's own broadcasts): the guard words it in the same codes
        kinds = {(fp.get("op"), fp.get("root"), fp.get("reduce_op")) for fp in seen.values()}
        code = "CL203" if len(kinds) > 1 else "CL204"
        heads.append(
            f"{code} {rule_of(code).name}: collective #{seq + 1} on group '{group}' differs "
            f"across ranks ({'op, root or reduce op' if code == 'CL203' else 'shape or dtype'})."
        )
        fixes.append(
            "Issue the collectives of this group in the same order, with the same arguments, "
            "on every rank."
        )
    lines = [f"commlint guard: {heads[0]}", *(f"  {h}" for h in heads[1:])]
    lines += [f"  rank {r}: {_fp_line(fp, group)}" for r, fp in sorted(seen.items())]
    lines += [f"  fix: {fix}" for fix in fixes]
    return "\n".join(lines)


_NUMBER = re.compile(r"#(\d+)( on group| on ')")


def p2p_mismatch_text(
    recv: dict[str, Any], sent: dict[str, Any], src: int, dst: int, world_size: int
) -> str:
    """The checker's CL204 text for a send and its receive that disagree."""
    from commlint.graph.check import check_trace

    group = recv.get("group", WORLD)
    fields = ("shape", "dtype", "site")
    send = {"op": "send", "group": group, "peer": dst, **{k: sent[k] for k in fields if k in sent}}
    got = {"op": "recv", "group": group, "peer": src, **{k: recv[k] for k in fields if k in recv}}
    trace = Trace(world_size=world_size)
    for r in range(world_size):
        trace.ranks[r] = []
    trace.ranks[src] = [Action.model_validate(send)]
    trace.ranks[dst] = [Action.model_validate(got)]
    if group != WORLD:
        trace.groups[group] = sorted({src, dst})
    result = check_trace(trace, "gloo", reorder=False, symmetry=False)
    found = [f for f in result.findings if f.code == "CL204"]
    at = {r: f" @{a['site']}" if a.get("site") else "" for r, a in ((src, send), (dst, got))}
    sides = [
        f"  rank {src}: send(→{dst}) shape {send.get('shape')} {send.get('dtype')}{at[src]}",
        f"  rank {dst}: recv(←{src}) shape {got.get('shape')} {got.get('dtype')}{at[dst]}",
    ]
    if not found:
        from commlint.rules import rule_of

        head = f"CL204 {rule_of('CL204').name}: the send and its receive differ."
        fix = "Send and receive tensors of one shape and dtype."
    else:
        head, fix = f"{found[0].code} {found[0].name}: {found[0].message}", found[0].fix
    return "\n".join([f"commlint guard: {head}", *sides, *([f"  fix: {fix}"] if fix else [])])
