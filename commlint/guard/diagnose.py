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
            if "key" in e and e["key"] not in first:
                first[e["key"]] = e["seq"]
        for k, n in s.get("next_seq", {}).items():
            first.setdefault(k, n)
        oldest[r] = first
    frontier: dict[int, dict[str, int]] = {}
    for r, s in states.items():
        if "entries" not in s:
            continue
        front = dict(s.get("next_seq", {}))
        for e in s["entries"]:
            if "key" in e and e.get("state") != "done":
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


def _end_of(s: dict[str, Any]) -> RankEnd | None:
    status = s.get("status")
    if status == "running":
        return RankEnd(
            kind="timeout",
            message="it is still running outside any communication call; it may get there",
        )
    if status == "dead":
        return RankEnd(
            kind="exception",
            message=s.get("why") or "the process is gone: no heartbeat and no exit recorded",
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
    running = {r for r, s in states.items() if s.get("status") == "running"}
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


def _rank_line(s: dict[str, Any]) -> str:
    status = s.get("status")
    if status == "blocked":
        e = s.get("inflight") or {}
        what = _describe(e)
        return f"blocked {s.get('blocked_for', 0):.1f} s in {what}"
    if status == "running":
        return "running (not in a communication call)"
    if status == "dead":
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
    except Exception:
        text = str(e.get("op"))
    return text + (f" @{e['site']}" if e.get("site") else "")


def _fields(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in ACTION_FIELDS and v is not None}


def mismatch_text(
    group: str,
    members: list[int],
    seq: int,
    seen: dict[int, dict[str, Any]],
    world_size: int,
    history: dict[int, list[dict[str, Any]]] | None = None,
) -> str:
    """The checker's CL203/CL204 text for one collective whose members disagree, worded at
    the user's line (`commlint.graph.align`) from the calls just before it (`history`: each
    rank's earlier fingerprints on the group, oldest first)."""
    from commlint.graph.align import explain
    from commlint.graph.check import check_trace

    history = history or {}
    # every rank's window starts at the same call: the latest one all of them still hold
    first = max((h[0]["seq"] for h in history.values() if h), default=seq)
    if any(not h or h[-1].get("seq") != seq - 1 for r, h in history.items() if r in seen):
        first = seq  # a gap in some rank's history: compare the call itself only
    if set(history) != set(seen):
        first = seq
    trace = Trace(world_size=world_size, groups={} if group == WORLD else {group: members})
    for r in range(world_size):
        fp = seen.get(r)
        if fp is None:
            trace.ranks[r] = []
            continue
        past = [h for h in history.get(r, []) if first <= h.get("seq", -1) < seq]
        trace.ranks[r] = [
            Action.model_validate({**_fields(h), "group": group}) for h in [*past, fp]
        ]
    offset = seq - first
    result = check_trace(trace, "gloo", reorder=False, symmetry=False)
    found = [
        f
        for f in result.findings
        if f.code in ("CL203", "CL204") and f.actions and f.actions[0].action == offset
    ]
    if not found:  # the checker tolerates it (e.g. a reduce op spelled two ways): say what differs
        return f"collective #{seq + 1} on group '{group}' differs across ranks: " + json.dumps(
            seen, sort_keys=True
        )
    explain(found, trace)
    parts = []
    for f in found:
        # the window's numbers are the job's, shifted by the calls before it
        msg = _NUMBER.sub(lambda m: f"#{int(m.group(1)) + first}{m.group(2)}", f.message)
        fix = _NUMBER.sub(lambda m: f"#{int(m.group(1)) + first}{m.group(2)}", f.fix or "")
        parts.append(f"{f.code} {f.name}: {msg}" + (f" Fix: {fix}" if fix else ""))
    return "commlint guard: " + " ".join(parts)


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
    if not found:
        return f"send {sent} from rank {src} and recv {recv} on rank {dst} differ"
    f = found[0]
    return f"commlint guard: {f.code} {f.name}: {f.message}" + (f" Fix: {f.fix}" if f.fix else "")
