"""Process groups whose members name them differently (CL212).

torch names a group created by `new_group` with a counter (`_world.group_count`): the n-th
`new_group` call of a rank makes group "n" (unless `use_local_synchronization=True`, which
hashes the member list). The name is the prefix of the group's rendezvous keys in the store,
so the members of one group must all arrive at it under the same name — which is why torch
asks every rank, member or not, to call `new_group` for every group in the same order. A rank
that skips one call (`if rank in ranks: new_group(ranks)`) names every later group one lower:
members then wait in the rendezvous (gloo connects when the group is created, NCCL at its first
collective) for peers that publish under another name, until the timeout. Two different groups
created under one name share their store keys, and their members meet the wrong peers.

The dry-run records every creation per rank (`meta.group_creations`: rank → list of
`{name, ranks, site}` in call order); the trace's own group names are member lists, so the
checker would otherwise pair these members' collectives as if the rendezvous had worked.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from commlint.findings import Finding, Location
from commlint.trace import Trace

_FIX = (
    "Call new_group on every rank — members and non-members — with the same ranks, in the "
    "same order (build all groups in one loop on every rank, then keep the one this rank is "
    "in), or pass use_local_synchronization=True when only the members call it."
)
FIX = _FIX  # the runtime guard words its own CL212 with it


def site_location(site: object) -> tuple[str | None, int | None]:
    """`path:line` → (path, line); (None, None) when it is not one."""
    path, _, line = str(site or "").rpartition(":")
    if path and line.isdigit():
        return path, int(line)
    return None, None


def _creations(trace: Trace) -> dict[int, list[dict[str, Any]]]:
    """Each rank's creations; ranks whose lists are the same (rank classes share one list
    between a recorded rank and those derived from it, and every rank of a mesh makes the same
    groups) get one list object, read once."""
    raw = trace.meta.get("group_creations")
    if not isinstance(raw, dict):
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    by_id: dict[int, list[dict[str, Any]]] = {}
    by_content: dict[tuple, list[dict[str, Any]]] = {}
    for rank, items in raw.items():
        try:
            r = int(rank)
        except (TypeError, ValueError):
            continue
        if not isinstance(items, list):
            continue
        if id(items) not in by_id:
            made = [
                {
                    "name": str(c.get("name")),
                    "ranks": tuple(int(x) for x in c.get("ranks") or ()),
                    "site": c.get("site"),
                    "index": k,
                }
                for k, c in enumerate(items)
                if isinstance(c, dict) and c.get("ranks")
            ]
            content = tuple((c["name"], c["ranks"], c["site"], c["index"]) for c in made)
            by_id[id(items)] = by_content.setdefault(content, made)
        out[r] = by_id[id(items)]
    return out


def _call(c: dict[str, Any]) -> str:
    at = f" at {c['site']}" if c.get("site") else ""
    return f"its new_group call #{c['index'] + 1}{at}"


def _skipped(mine: list[dict], theirs: list[dict]) -> str:
    """Where the two ranks' sequences of new_group calls part: the likely root cause."""
    for a, b in zip(mine, theirs, strict=False):
        if a["ranks"] != b["ranks"]:
            return (
                f"; their new_group calls part at call #{a['index'] + 1}: "
                f"ranks {list(a['ranks'])}{' at ' + a['site'] if a.get('site') else ''} "
                f"against ranks {list(b['ranks'])}"
                f"{' at ' + b['site'] if b.get('site') else ''}"
            )
    if len(mine) != len(theirs):
        return f"; one makes {len(mine)} new_group calls, the other {len(theirs)}"
    return ""


def _finding(message: str, ranks: list[int], places: list[tuple[int, dict]]) -> Finding:
    from commlint.rules import rule_of

    path, line = site_location(places[0][1].get("site"))
    related = []
    for r, c in places:
        p, ln = site_location(c.get("site"))
        related.append(
            Location(
                path=p,
                line=ln,
                rank=r,
                site=c.get("site"),
                message=f"rank {r} creates ranks {list(c['ranks'])} as group '{c['name']}'",
            )
        )
    return Finding(
        code="CL212",
        name=rule_of("CL212").name,
        severity="error",
        message=message,
        path=path,
        line=line,
        col=1 if line is not None else None,
        ranks=sorted(set(ranks)),
        related=related,
        fix=_FIX,
    )


def group_name_findings(trace: Trace) -> list[Finding]:
    """CL212: members of one group that name it differently, and two groups under one name."""
    made = _creations(trace)
    if not made:
        return []
    findings: list[Finding] = []
    # The k-th group over the same member list on each member: one group. Ranks that share
    # one list are read together: each creation once, for its members among them (a
    # non-member builds nothing: the name matters to members only) — the cost is the lists'
    # members, not ranks x creations.
    sharing: dict[int, set[int]] = defaultdict(set)
    lists: dict[int, list[dict]] = {}
    for r, items in made.items():
        sharing[id(items)].add(r)
        lists[id(items)] = items
    groups: dict[tuple[tuple[int, ...], int], dict[int, dict]] = defaultdict(dict)
    by_name: dict[str, dict[tuple[int, ...], tuple[int, dict]]] = defaultdict(dict)
    for key in sorted(lists, key=lambda k: min(sharing[k])):
        ranks = sharing[key]
        seen: dict[tuple[int, ...], int] = defaultdict(int)
        for c in lists[key]:
            k = seen[c["ranks"]]  # the same count on each member (the same list before it)
            seen[c["ranks"]] += 1
            members = [m for m in c["ranks"] if m in ranks]
            for m in members:
                groups[(c["ranks"], k)][m] = c
            if members:
                first = by_name[c["name"]].get(c["ranks"])
                if first is None or min(members) < first[0]:
                    by_name[c["name"]][c["ranks"]] = (min(members), c)
    # a member that stopped early (raised, exited, timed out) is CL210's, not a naming issue
    stopped = {r for r, end in trace.ends.items() if end.kind != "finished"}
    # One root cause per divergence: a skipped call renames every later group, so report the
    # first group its members disagree on (in call order) and count the others.
    wrong: list[tuple[int, Finding]] = []
    for (members, _), per_rank in groups.items():
        names = {c["name"] for c in per_rank.values()}
        missing = [m for m in members if m in made and m not in per_rank and m not in stopped]
        order = min(c["index"] for c in per_rank.values())
        if len(names) > 1:
            (r0, c0), (r1, c1) = next(
                (a, b)
                for a in sorted(per_rank.items())
                for b in sorted(per_rank.items())
                if a[1]["name"] != b[1]["name"]
            )
            message = (
                f"rank {r0} creates the group of ranks {list(members)} as '{c0['name']}' "
                f"({_call(c0)}), rank {r1} as '{c1['name']}' ({_call(c1)}): a group's name "
                "counts new_group calls, so its members wait in its rendezvous for each other "
                "under different names — a hang at its creation (gloo) or its first "
                f"collective (NCCL){_skipped(made[r0], made[r1])}"
            )
            wrong.append((order, _finding(message, [r0, r1], [(r0, c0), (r1, c1)])))
        elif missing:
            r0, c0 = min(per_rank.items())
            message = (
                f"rank {r0} creates the group of ranks {list(members)} ({_call(c0)}) but "
                f"member{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                f"never create{'s' if len(missing) == 1 else ''} it: the others wait in its "
                "rendezvous for them — a hang at its creation (gloo) or its first "
                "collective (NCCL)"
            )
            wrong.append((order, _finding(message, [r0, *missing], [(r0, c0)])))
    if wrong:
        wrong.sort(key=lambda x: (x[0], x[1].message))
        first = wrong[0][1]
        if len(wrong) > 1:
            more = len(wrong) - 1
            first.message += (
                f" ({more} later group{'s are' if more > 1 else ' is'} named differently "
                "by its members for the same reason)"
            )
        return [first]
    for name, sets in sorted(by_name.items()):
        if len(sets) > 1:
            (s0, (r0, c0)), (s1, (r1, c1)) = sorted(sets.items())[:2]
            message = (
                f"two different groups are created under the name '{name}': ranks {list(s0)} "
                f"on rank {r0} ({_call(c0)}) and ranks {list(s1)} on rank {r1} ({_call(c1)}); "
                "they share the group's rendezvous keys in the store, so their members meet "
                f"the wrong peers — a hang or crossed connections{_skipped(made[r0], made[r1])}"
            )
            findings.append(_finding(message, [r0, r1], [(r0, c0), (r1, c1)]))
            break
    return findings
