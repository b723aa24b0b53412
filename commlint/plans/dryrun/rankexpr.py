"""Rank classes, in the parent: a recorded rank's path condition and rank expressions, and
the trace of another rank of its class, relabelled from the recorded one.

A rank recorded with `--rank-classes` sends, with its actions, a `ClassRecord`
(`tracked.py`): every test its program made of a value derived from its rank, as a
condition on `r` that held (the path condition), the rank expressions of the peers and
roots of its actions, and those of the members of the groups it made. Every value derived
from the rank was a tracked expression of `r` until it escaped, and every escape (an
index, `int()`, a hash, a string, a tensor) added `expr == value` to the condition: so
any rank `r2` for which the whole condition holds runs the same program path, and its
trace is the recorded one with each expression evaluated at `r2` (`relabel`). A record
that could not be proved (`unproven`: randomness of the rank's own, a peer with no
expression) covers only its own rank.

Expressions are Python over `r` and a few helpers (`_m(k)`: the k-th member list evaluated
at `r`; `_asc(list)`: the list is strictly increasing), evaluated with no builtins.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any


@dataclass
class ClassRecord:
    """What one recorded rank's run proved about the ranks that take its path."""

    conds: list[str] = field(default_factory=list)  # each holds at the recorded rank
    lists: list[list[str]] = field(default_factory=list)  # member expressions, `_m(k)`
    actions: dict[int, dict[str, str]] = field(default_factory=dict)  # index -> peer/root
    groups: dict[str, int] = field(default_factory=dict)  # group name -> index in `lists`
    creations: dict[int, int] = field(default_factory=dict)  # creation index -> `lists`
    # creation index -> the groups made before it, for a name torch hashes from the members
    hashed: dict[int, int] = field(default_factory=dict)
    unproven: str | None = None  # why this run covers only its own rank
    escapes: list[str] = field(default_factory=list)  # where values left the tracking

    @classmethod
    def from_message(cls, payload: dict[str, Any]) -> ClassRecord:
        return cls(
            conds=list(payload.get("conds", ())),
            lists=[list(x) for x in payload.get("lists", ())],
            actions={int(k): dict(v) for k, v in payload.get("actions", {}).items()},
            groups=dict(payload.get("groups", {})),
            creations={int(k): int(v) for k, v in payload.get("creations", {}).items()},
            hashed={int(k): int(v) for k, v in payload.get("hashed", {}).items()},
            unproven=payload.get("unproven"),
            escapes=list(payload.get("escapes", ())),
        )


def hashed_name(ranks: list[int], made: int) -> str:
    """torch's name of a group made with `use_local_synchronization` (`_hash_ranks_to_str`):
    a hash of its members and of how many groups existed before it."""
    text = "_".join(["_".join(map(str, ranks)), str(made)])
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def _asc(values: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


@lru_cache(maxsize=65536)
def _code(expr: str) -> Any:
    return compile(expr, "<rank expression>", "eval")


class Evaluator:
    """Evaluates one record's expressions at any rank."""

    def __init__(self, record: ClassRecord) -> None:
        self.record = record
        self._cond = _code(" and ".join(f"({c})" for c in record.conds) or "True")

    def env(self, r: int) -> dict[str, Any]:
        lists = self.record.lists
        memo: dict[int, list[int]] = {}
        env: dict[str, Any] = {"__builtins__": {}, "r": r, "abs": abs, "_asc": _asc}

        def m(k: int) -> list[int]:
            if k not in memo:
                memo[k] = [eval(_code(e), env) for e in lists[k]]
            return memo[k]

        env["_m"] = m
        return env

    def value(self, expr: str, env: dict[str, Any]) -> Any:
        return eval(_code(expr), env)

    def holds(self, r: int) -> bool:
        try:
            return bool(eval(self._cond, self.env(r)))
        except Exception:  # an index out of range, a division by zero: not this path
            return False


def _compact(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if rs == list(range(rs[0], rs[-1] + 1)) and len(rs) > 2:
        return f"{rs[0]}-{rs[-1]}"
    return "_".join(str(r) for r in ranks)


def _renamed(name: str, members: list[int]) -> str:
    suffix = name[name.index("#") :] if "#" in name else ""
    return "g" + _compact(members) + suffix


def unproven_reason(record: ClassRecord, run: Any, rank: int) -> str | None:
    """Why `record` does not describe `run` of `rank` exactly (None: it does): every
    condition holds at the rank, every peer and root has an expression giving the recorded
    value, every group with member expressions has the recorded members."""
    if record.unproven:
        return record.unproven
    ev = Evaluator(record)
    if not ev.holds(rank):
        return "its path condition does not hold at its own rank"
    env = ev.env(rank)
    for i, a in enumerate(run.actions):
        exprs = record.actions.get(i, {})
        for key in ("peer", "root"):
            if key in a:
                if key not in exprs:
                    return f"the {key} of its {a.get('op')} has no rank expression"
                try:
                    if ev.value(exprs[key], env) != a[key]:
                        return f"the {key} of its {a.get('op')} is not its rank expression"
                except Exception:
                    return f"the {key} of its {a.get('op')} is not its rank expression"
    for name, k in record.groups.items():
        if name in run.groups and env["_m"](k) != run.groups[name]:
            return f"the members of group {name} are not their rank expressions"
    for i, k in record.creations.items():
        if i < len(run.creations) and env["_m"](k) != run.creations[i]["ranks"]:
            return "the members of a group it created are not their rank expressions"
    return None


def relabel(run: Any, record: ClassRecord, rank: int, other: int) -> Any | None:
    """The run of `other`, a rank of `rank`'s class, as `run` relabelled; None when the
    relabelled trace is not consistent (a group it uses would not hold it, two groups would
    become one): `other` must then be recorded itself."""
    ev = Evaluator(record)
    env = ev.env(other)
    names: dict[str, str] = {}
    groups: dict[str, list[int]] = {}
    for name, members in run.groups.items():
        if name in record.groups:
            new = list(env["_m"](record.groups[name]))
            if name == "WORLD":
                if new != members:
                    return None
                new_name = name
            else:
                new_name = _renamed(name, new)
        else:
            new, new_name = list(members), name
        names[name] = new_name
        if new_name in groups and groups[new_name] != new:
            return None
        groups[new_name] = new
    if len(set(names.values())) != len(names):
        return None  # two of its groups would become one
    actions = []
    peers = {rank: other}  # a peer (or root) of the recorded rank -> the derived rank's
    for i, a in enumerate(run.actions):
        b = dict(a)
        group = a.get("group")
        if group is not None and group in names:
            b["group"] = names[group]
            if other not in groups[names[group]]:
                return None
        exprs = record.actions.get(i, {})
        for key in ("peer", "root"):
            if key in a:
                b[key] = ev.value(exprs[key], env)
                if peers.setdefault(a[key], b[key]) != b[key]:
                    return None  # one peer of the recorded rank, two of the derived one
        actions.append(b)
    values = _relabel_values(run, rank, other, names, groups, peers)
    if values is None:
        return None
    # Groups made with plain numbers (every rank making every group of a mesh, in one order)
    # are the same list on every rank of the class: shared, not copied (3,200 creations on
    # each of 4,096 ranks otherwise), and the CL212 check reads each such list once.
    creations = run.creations
    if record.creations:
        creations = []
        for i, c in enumerate(run.creations):
            k = record.creations.get(i)
            if k is None:
                creations.append(c)
                continue
            members = list(env["_m"](k))
            name = hashed_name(members, record.hashed[i]) if i in record.hashed else c["name"]
            creations.append({**c, "ranks": members, "name": name})
    return replace(
        run,
        actions=actions,
        groups=groups,
        creations=creations,
        sent=values[0],
        reads=values[1],
        seconds=0.0,
        cpu_seconds=None,
        peak_bytes=None,
        output="",
    )


def _relabel_values(
    run: Any,
    rank: int,
    other: int,
    names: dict[str, str],
    groups: dict[str, list[int]],
    peers: dict[int, int],
) -> tuple[dict, dict] | None:
    """What the derived rank sends and what it must read, as the recorded run's values under
    the relabelled keys (`values.py`): a collective's contributions by their place in the
    relabelled group, a message's sender and receiver through the relabelled peers. None when
    a key cannot be relabelled (the derived rank is then recorded itself).

    The reads are checked afterwards against what every rank, recorded or derived, sent
    (`classes.record_by_class`): a derived rank whose reads differ is recorded itself."""

    names = {"WORLD": "WORLD", **names}  # the default group, named or not in the run

    def place(group: str) -> dict[int, int] | None:
        if group not in names:
            return None
        old, new = run.groups.get(group), groups.get(names[group])
        if group == "WORLD" or old is None or new is None:
            return {}  # by global rank: the relabelled reads must be the same ranks'
        return dict(zip(old, new, strict=True))

    def key_of(key: tuple) -> tuple | None:
        kind = key[0]
        if kind in ("c", "m") and len(key) >= 2 and place(key[1]) is not None:
            return (kind, names[key[1]], *key[2:])
        if kind in ("p", "s") and len(key) >= 4 and key[1] in names:
            src, dst = peers.get(key[2]), peers.get(key[3])
            if src is None or dst is None:
                return None
            return (kind, names[key[1]], src, dst, *key[4:])
        return None

    def signature(key: tuple, sig: tuple) -> tuple | None:
        moved = place(key[1]) if key[0] in ("c", "m") else peers
        if moved is None:
            return None
        items = {(x[0] if isinstance(x, tuple) else x): x for x in sig}
        if moved is not peers and moved:
            # The derived rank's place in its group may be another than the recorded rank's
            # (a middle pipeline stage for another): what the recorded rank saw at the derived
            # rank's place must be its own contribution, which the derived rank's place-mate
            # of the recorded rank then sends it.
            old, new = run.groups[key[1]], groups[names[key[1]]]
            i, j = old.index(rank), new.index(other)
            if i != j:
                own = own_item(key, old[j])
                if items.pop(old[j], None) != own:
                    return None
                if own is not None:
                    items[rank] = own
        out = []
        for who, item in items.items():
            to = moved.get(who, who)
            out.append((to, *item[1:]) if isinstance(item, tuple) else to)
        return tuple(sorted(out))

    def own_item(key: tuple, who: int) -> Any:
        """The recorded rank's own contribution to `key` as a signature item of `who`."""
        if key not in run.sent:
            return None
        if key[0] == "m":
            return who
        v = run.sent[key]
        return (who, v.digest if hasattr(v, "digest") else repr(v))

    sent, reads = {}, {}
    for key, value in run.sent.items():
        k = key_of(key)
        if k is None:
            return None
        sent[k] = value
    for key, sig in run.reads.items():
        k = key_of(key)
        s = signature(key, sig) if k is not None else None
        if k is None or s is None:
            return None
        reads[k] = s
    return sent, reads


def sent_as(run: Any, record: ClassRecord, rank: int, other: int) -> dict[tuple, Any]:
    """What `run` of `rank` sent — its messages (None for one without a value, a fake
    tensor's) and its contributions to collectives — under the keys `other` would send them
    with if it took the same path (groups and peers re-evaluated at `other`): a guess of what
    `other` sends, for a rank waiting for it before it is covered (`classes.py`).

    Unlike `relabel` this proves nothing, so it does not fail where `other`'s path would
    differ: a peer the expressions map two ways (a root that is the rank itself at `rank`
    and another rank at `other`) is left out, with the messages that name it."""
    ev = Evaluator(record)
    env = ev.env(other)
    names = {"WORLD": "WORLD"}  # the default group, named in the run or not
    for name in run.groups:
        if name in record.groups and name != "WORLD":
            names[name] = _renamed(name, list(env["_m"](record.groups[name])))
        else:
            names[name] = name
    peers: dict[int, int | None] = {}
    for i, a in enumerate(run.actions):
        for key, expr in record.actions.get(i, {}).items():
            if key in a and a[key] != rank:
                try:
                    to = ev.value(expr, env)
                except Exception:
                    to = None
                if peers.setdefault(a[key], to) != to:
                    peers[a[key]] = None  # mapped two ways
    peers[rank] = other
    out = {}
    for key, value in run.sent.items():
        if key[1] not in names:
            continue
        if key[0] in ("c", "m"):
            out[(key[0], names[key[1]], *key[2:])] = value
        elif key[0] == "s":  # every message has its existence key, and a value key or not
            src, dst = peers.get(key[2]), peers.get(key[3])
            if src is not None and dst is not None:
                out[("p", names[key[1]], src, dst, *key[4:])] = run.sent.get(("p", *key[1:]))
    return out


def cover(
    record: ClassRecord, run: Any, rank: int, candidates: list[int]
) -> tuple[dict[int, Any], str | None]:
    """The runs of the `candidates` that `rank`'s record proves take its path, relabelled;
    and why it proves nothing when it does not."""
    why = unproven_reason(record, run, rank)
    if why is not None:
        return {}, why
    ev = Evaluator(record)
    out: dict[int, Any] = {}
    for other in candidates:
        if other == rank or not ev.holds(other):
            continue
        try:
            derived = relabel(run, record, rank, other)
        except Exception:  # an expression that fails at `other`: not its path
            derived = None
        if derived is not None:
            out[other] = derived
    return out, None


__all__: list[str] = [
    "ClassRecord",
    "Evaluator",
    "cover",
    "relabel",
    "sent_as",
    "unproven_reason",
]
