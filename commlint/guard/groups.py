"""Group creation is collective: `new_group`, `new_subgroups`, `split_group`,
`init_device_mesh` and `DeviceMesh._unflatten` must be called by every rank of their parent,
in the same sequence, with the same arguments.

torch names a group by how many groups the rank created before it; the name keys the group's
rendezvous in the store. A rank that creates groups in another sequence — or skips one,
`if rank in eval_ranks: new_group(eval_ranks)` — names every later group differently from its
peers, and the members wait in the rendezvous for keys nobody writes, until the timeout (the
first collective then fails somewhere else entirely). So the k-th creation on a parent is
fingerprinted like a collective: each member publishes what it creates (the function and the
arguments that must agree) and compares with the others before the call can hang — CL212.
A creation with `use_local_synchronization=True` is made by the members only: not checked.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import time
from typing import Any

from commlint.guard.core import _place
from commlint.guard.ring import DONE, FAILED, PENDING

# function -> the arguments every rank must pass alike, and the one naming the parent group
CREATORS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "new_group": (("ranks",), None),
    "new_subgroups": (("group_size",), "group"),
    "new_subgroups_by_enumeration": (("ranks_per_subgroup_list",), None),
    "split_group": (("split_ranks",), "parent_pg"),
    "init_device_mesh": (("device_type", "mesh_shape", "mesh_dim_names"), None),
    "_unflatten": (("dim", "mesh_sizes", "mesh_dim_names"), None),
}
# how long the creating call waits for its peers' fingerprints (creations are rare: always)
CREATE_WAIT = 1.0


def _value(name: str, value: Any, world_size: int) -> Any:
    if name == "ranks" and value is None:
        return list(range(world_size))
    if name == "ranks":
        return sorted(int(r) for r in value)
    if isinstance(value, tuple):
        return list(value)
    if value is None or isinstance(value, (int, str, float, bool, list)):
        return value
    return str(value)


def describe_creation(
    api: str, fn: Any, args: tuple, kwargs: dict, world_size: int
) -> tuple[str, Any, list[int] | None] | None:
    """(`new_group(ranks=[0, 1])`, the parent group argument, the new group's members when
    known), or None when the call is made by its members only (`use_local_synchronization`)
    or its arguments do not bind."""
    agree, parent_arg = CREATORS[api]
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    given = bound.arguments
    if given.get("use_local_synchronization"):
        return None
    parts = []
    for name in agree:
        if name in given or name == "ranks":
            value = json.dumps(_value(name, given.get(name), world_size))
            parts.append(f"{name}={value}")
    parent = given.get(parent_arg) if parent_arg else None
    members = _value("ranks", given.get("ranks"), world_size) if api == "new_group" else None
    return f"{api}({', '.join(parts)})", parent, members


def wrap_creator(guard: Any, api: str, fn: Any) -> Any:
    """`fn` recorded as a blocking creation on its parent group, fingerprinted first."""

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        local = guard.local
        if not guard.enabled or getattr(local, "depth", 0) or not guard.started():
            return fn(*args, **kwargs)
        try:
            described = describe_creation(api, fn, args, kwargs, guard.world_size)
        except Exception:  # arguments torch itself will reject: let torch say so
            described = None
        if described is None or guard.ring is None:
            return guard.call_inner(fn, args, kwargs)
        return create(guard, described, fn, args, kwargs)

    guarded.__commlint_guard__ = True  # type: ignore[attr-defined]
    return guarded


def create(guard: Any, described: tuple, fn: Any, args: tuple, kwargs: dict) -> Any:
    """Record the creation (blocking: gloo connects the members in it), check it, make it."""
    what, parent, new_members = described
    ring = guard.ring
    name, members = guard.group_of(parent)
    e: dict[str, Any] = {"op": what.split("(")[0], "group": name, "label": what}
    e["state"] = PENDING
    if new_members is not None:
        # a rank stuck in it waits for these (the stall check sees it as their barrier)
        e["members"] = new_members
    _place(e, guard.site())
    ring.add(e, f"create:{name}")
    if guard.every and len(members) > 1 and guard.rank in members:
        from commlint.guard.core import CommlintGuardError, _brief

        try:
            check_creation(guard, e, members)
        except CommlintGuardError:
            raise
        except Exception as exc:  # the side channel failed: go on as unguarded
            guard.degrade(f"group-creation check failed: {_brief(exc)}")
    ring.block(e)
    try:
        result = guard.call_inner(fn, args, kwargs)
    except BaseException:
        guard.hold_if_leaving()
        ring.finish(e, FAILED)
        raise
    ring.finish(e, DONE)
    return result


def check_creation(guard: Any, e: dict[str, Any], members: list[int]) -> None:
    """Publish this creation; wait (up to `CREATE_WAIT`) for every member's and compare."""
    from commlint.guard.core import CommlintGuardError

    store = guard.store()
    seq = e["seq"]
    slot, first_round = guard.slot(seq * guard.every)
    group = e["group"]
    fp = {"seq": seq, "what": e["label"], "site": e.get("site")}
    store.set(f"cfp/{group}/{slot}/{guard.rank}", json.dumps(fp))
    others = [r for r in members if r != guard.rank]
    keys = [f"cfp/{group}/{slot}/{r}" for r in others]
    seen = {guard.rank: fp}
    deadline = time.monotonic() + CREATE_WAIT
    pause = 0.001
    while True:
        for r, k in zip(others, keys, strict=True):
            if r in seen or (first_round and not store.check([k])):
                continue
            theirs = json.loads(store.get(k))
            if theirs.get("seq") == seq:
                seen[r] = theirs
        if len(seen) == len(members) or time.monotonic() > deadline:
            break
        time.sleep(pause)
        pause = min(2 * pause, 0.02)
    if len({s["what"] for s in seen.values()}) < 2:
        return
    text = creation_mismatch_text(group, seq, seen)
    guard.ring.finish(e, FAILED)
    guard.found(text, None)
    # if the store fails, the peers' watchdogs do not hear of it; this rank still stops
    with contextlib.suppress(Exception):
        store.set("fperr", json.dumps({"rank": guard.rank, "text": text}))
    raise CommlintGuardError(text)


def creation_mismatch_text(group: str, seq: int, seen: dict[int, dict[str, Any]]) -> str:
    """The CL212 block: which ranks create what, where, and the fix."""
    from commlint.graph.group_names import FIX
    from commlint.rules import rule_of

    by_what: dict[str, list[int]] = {}
    for r, s in sorted(seen.items()):
        by_what.setdefault(s["what"], []).append(r)
    sides = "; ".join(
        f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} "
        f"{'call' if len(rs) > 1 else 'calls'} {what}"
        for what, rs in by_what.items()
    )
    lines = [
        f"commlint guard: CL212 {rule_of('CL212').name}: group creation #{seq + 1} on "
        f"'{group}' differs across ranks: {sides}. torch names a group by the count of groups "
        "the rank created before it: from here the ranks name their groups differently and the "
        "members wait in a group's rendezvous for peers that never arrive under that name."
    ]
    for r, s in sorted(seen.items()):
        at = f" @{s['site']}" if s.get("site") else ""
        lines.append(f"  rank {r}: {s['what']}{at}")
    lines.append(f"  fix: {FIX}")
    return "\n".join(lines)
