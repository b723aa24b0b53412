"""Rank classes, inside one simulated rank (`--rank-classes`): the rank as a tracked value.

Every way the program learns its rank gives a `RankValue`, a number that carries its
expression in `r` (the global rank): `ProcessGroup.rank()` — so `dist.get_rank()`, whatever
module it was imported into —, `get_group_rank`/`get_global_rank`, and the arithmetic on
them. It is not an `int` (C code would read an int subclass's value without asking), though
`isinstance(x, int)` holds; so every use of it goes through one of its methods:

- arithmetic with numbers gives another `RankValue`;
- a comparison or truth test gives a plain bool and adds `expr OP other` (or its negation)
  to the rank's path condition;
- anything else — `__index__` (indexing, slicing, `range`, sizes), `int()`, `float()`,
  `hash()` (a dict key), `str()`/formatting, pickling, a tensor — *concretises* it: the
  plain value is returned and `expr == value` is added to the path condition, so every rank
  of the class has that same value there. Using the whole rank that way leaves a class of
  one rank: that rank is then recorded itself.

Other sources of the rank are concretised where they are read: torchrun's variables in
`os.environ` (`RANK`, `LOCAL_RANK`, `GROUP_RANK`…), and on the `cuda` target the local rank
(the stand-in GPU's index: `r % nproc_per_node`). A rank that draws from its own
randomness (an unseeded generator, `os.urandom`) proves nothing about any other rank.

Communication calls (`dist.send/recv/isend/irecv/broadcast/reduce/gather/scatter`, the
object collectives, `P2POp`, `new_group`) run with plain values inside a *window* and note
the expression of each peer, root and group member on the actions they record; inside a
window the rank's own rank is plain too (torch's bookkeeping of the call itself: the call's
relation to the rank — `r == root`, `r in ranks` — is added to the condition here).
At the end the rank sends its `ClassRecord` (`rankexpr.py`) to the parent.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
from typing import Any

from commlint.plans.dryrun import rankexpr

_MAX_EXPR = 2000  # longer expressions are concretised (a loop adding to the rank)
_MAX_CONDS = 4096  # more distinct conditions: the rank proves nothing (`unproven`)


class _State:
    def __init__(self, rank: int, world: int, nproc: int) -> None:
        self.rank = rank
        self.world = world
        self.nproc = nproc
        self.conds: dict[str, None] = {}
        self._thread = threading.local()  # windows are per thread: another one sees the rank
        self.actions: dict[int, dict[str, str]] = {}
        self.count = 0  # actions sent
        self.creation_count = 0
        self.lists: list[list[str]] = []
        self.list_index: dict[tuple[str, ...], int] = {}
        self.torch_groups: dict[str, int] = {}  # torch's group name -> `lists` index
        self.groups: dict[str, int] = {}  # the recorder's group name -> `lists` index
        self.creations: dict[int, int] = {}
        self.hashed: dict[int, int] = {}  # creation index -> groups before it (its name)
        self.unproven: str | None = None
        self.escapes: list[str] = []
        self.pending_members: list[str] | None = None  # of the new_group being made
        self.harmless = 0  # > 0: strings made now go to logs only (`tracked_modules.py`)

    @property
    def window(self) -> int:
        return getattr(self._thread, "depth", 0)

    @window.setter
    def window(self, depth: int) -> None:
        self._thread.depth = depth

    @property
    def contexts(self) -> list[dict[str, str]]:  # the windows of this thread
        return self._thread.__dict__.setdefault("contexts", [])

    def add(self, cond: str) -> None:
        if len(self.conds) >= _MAX_CONDS and cond not in self.conds:
            self.unproven = self.unproven or "its path condition grew too long"
            return
        self.conds[cond] = None

    def member_list(self, exprs: list[str]) -> int:
        key = tuple(exprs)
        if key not in self.list_index:
            self.list_index[key] = len(self.lists)
            self.lists.append(list(exprs))
        return self.list_index[key]

    def payload(self) -> dict[str, Any]:
        return {
            "conds": list(self.conds),
            "lists": self.lists,
            "actions": self.actions,
            "groups": self.groups,
            "creations": self.creations,
            "hashed": self.hashed,
            "unproven": self.unproven,
            "escapes": self.escapes[:8],
        }


STATE: _State | None = None


def _where() -> str:
    """The user's line a value escaped at (for the note), best effort."""
    f = sys._getframe(3)
    while f is not None and (
        "commlint" in f.f_code.co_filename or "/torch/" in f.f_code.co_filename
    ):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


class RankValue:
    """A number derived from the rank, with its expression in `r` (see the module)."""

    __slots__ = ("_e", "_v")

    def __init__(self, expr: str, value: int) -> None:
        self._e = expr
        self._v = value

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(x, int) holds, as for the plain rank
        return int

    def _concrete(self, how: str = "") -> int:
        st = STATE
        if st is not None:
            st.add(f"({self._e}) == {self._v!r}")
            if len(st.escapes) < 8:
                st.escapes.append(f"{how} at {_where()}")
        return self._v

    # -- escapes ---------------------------------------------------------------------------
    def __index__(self) -> int:
        return self._concrete("an index or size")

    def __int__(self) -> int:
        return self._concrete("int()")

    def __float__(self) -> float:
        return float(self._concrete("float()"))

    def __complex__(self) -> complex:
        return complex(self._concrete("complex()"))

    def __hash__(self) -> int:
        return hash(self._concrete("a hash (a dict key, a set)"))

    def _text(self) -> int:
        st = STATE
        return self._v if st is not None and st.harmless else self._concrete("a string")

    def __str__(self) -> str:
        return str(self._text())

    def __repr__(self) -> str:
        return repr(self._text())

    def __format__(self, spec: str) -> str:
        return format(self._text(), spec)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (int, (self._concrete("pickling"),))

    def __copy__(self) -> RankValue:
        return self

    def __deepcopy__(self, memo: Any) -> RankValue:
        return self

    def __getattr__(self, name: str) -> Any:  # int's own methods: bit_length, to_bytes…
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._concrete(f".{name}"), name)

    def __round__(self, n: Any = None) -> Any:
        return self if n is None else round(self._concrete("round()"), n)

    def __trunc__(self) -> RankValue:
        return self

    __floor__ = __ceil__ = __trunc__

    # -- tests -----------------------------------------------------------------------------
    def __bool__(self) -> bool:
        out = self._v != 0
        if STATE is not None:
            STATE.add(f"({self._e}) != 0" if out else f"({self._e}) == 0")
        return out


def _operand(x: Any) -> tuple[str, Any] | None:
    """`x` as (expression, value) when it is a rank value or a plain number."""
    if type(x) is RankValue:
        return x._e, x._v
    if type(x) in (int, bool):
        return repr(int(x)), int(x)
    return None


def make(expr: str, value: Any) -> Any:
    """A rank value for `expr`; a plain value when it is not an int or too long."""
    if type(value) is not int:
        if STATE is not None:
            STATE.add(f"({expr}) == {value!r}")
        return value
    if len(expr) > _MAX_EXPR:
        if STATE is not None:
            STATE.add(f"({expr}) == {value!r}")
        return value
    return RankValue(expr, value)


def _binary(sym: str, fn: Any) -> tuple[Any, Any]:
    def op(self: RankValue, other: Any) -> Any:
        o = _operand(other)
        if o is None:
            return fn(self._concrete(f"`{sym}` with {type(other).__name__}"), other)
        return make(f"({self._e}{sym}{o[0]})", fn(self._v, o[1]))

    def rop(self: RankValue, other: Any) -> Any:
        o = _operand(other)
        if o is None:
            return fn(other, self._concrete(f"`{sym}` with {type(other).__name__}"))
        return make(f"({o[0]}{sym}{self._e})", fn(o[1], self._v))

    return op, rop


for _name, _sym, _fn in [
    ("add", "+", lambda a, b: a + b),
    ("sub", "-", lambda a, b: a - b),
    ("mul", "*", lambda a, b: a * b),
    ("floordiv", "//", lambda a, b: a // b),
    ("mod", "%", lambda a, b: a % b),
    ("pow", "**", lambda a, b: a**b),
    ("lshift", "<<", lambda a, b: a << b),
    ("rshift", ">>", lambda a, b: a >> b),
    ("and", "&", lambda a, b: a & b),
    ("or", "|", lambda a, b: a | b),
    ("xor", "^", lambda a, b: a ^ b),
    ("truediv", "/", lambda a, b: a / b),
]:
    _op, _rop = _binary(_sym, _fn)
    setattr(RankValue, f"__{_name}__", _op)
    setattr(RankValue, f"__r{_name}__", _rop)


def _divmod(self: RankValue, other: Any) -> Any:
    return (self // other, self % other)


def _rdivmod(self: RankValue, other: Any) -> Any:
    return (other // self, other % self)


RankValue.__divmod__ = _divmod  # type: ignore[attr-defined]
RankValue.__rdivmod__ = _rdivmod  # type: ignore[attr-defined]
RankValue.__neg__ = lambda self: make(f"(-{self._e})", -self._v)  # type: ignore[attr-defined]
RankValue.__pos__ = lambda self: self  # type: ignore[attr-defined]
RankValue.__abs__ = lambda self: make(f"abs({self._e})", abs(self._v))  # type: ignore[attr-defined]
RankValue.__invert__ = lambda self: make(f"(~{self._e})", ~self._v)  # type: ignore[attr-defined]

# Types an int never equals: a comparison with them says nothing about the rank.
_NEVER_EQUAL = (type(None), str, bytes, list, tuple, dict, set, frozenset)


def _comparison(sym: str, fn: Any) -> Any:
    def op(self: RankValue, other: Any) -> Any:
        o = _operand(other)
        if o is None and type(other) is float and other == other and abs(other) != float("inf"):
            o = (repr(other), other)
        if o is None:
            if sym in ("==", "!=") and isinstance(other, _NEVER_EQUAL):
                return sym == "!="
            return fn(self._concrete(f"`{sym}` with {type(other).__name__}"), other)
        out = fn(self._v, o[1])
        if STATE is not None:
            expr = f"({self._e}) {sym} ({o[0]})"
            STATE.add(expr if out else f"not ({expr})")
        return out

    return op


for _name, _sym, _fn in [
    ("eq", "==", lambda a, b: a == b),
    ("ne", "!=", lambda a, b: a != b),
    ("lt", "<", lambda a, b: a < b),
    ("le", "<=", lambda a, b: a <= b),
    ("gt", ">", lambda a, b: a > b),
    ("ge", ">=", lambda a, b: a >= b),
]:
    setattr(RankValue, f"__{_name}__", _comparison(_sym, _fn))


def expr_of(x: Any) -> str | None:
    """The expression of a rank argument: a rank value's, a plain int's literal."""
    if type(x) is RankValue:
        return x._e
    if type(x) in (int, bool):
        return repr(int(x))
    return None


def plain(x: Any) -> Any:
    """A peer, root or member argument with its rank values replaced by their values, with
    no condition: the call records their expressions instead."""
    if type(x) is RankValue:
        return x._v
    if type(x) in (list, tuple) and any(type(v) is RankValue for v in x):
        return type(x)(plain(v) for v in x)
    return x


def concrete(x: Any) -> Any:
    """Any other argument of a call: its rank values (in lists, tuples and dicts too) pinned
    (`RankValue._concrete`): a tag, a size, an object sent."""
    if type(x) is RankValue:
        return x._concrete("an argument of torch.distributed")
    if type(x) in (list, tuple):
        return type(x)(concrete(v) for v in x)
    if type(x) is dict:
        return {concrete(k): concrete(v) for k, v in x.items()}
    return x


@contextlib.contextmanager
def window(context: dict[str, str] | None = None) -> Any:
    st = STATE
    assert st is not None
    st.window += 1
    st.contexts.append(context or {})
    try:
        yield
    finally:
        st.contexts.pop()
        st.window -= 1


# -- installing -----------------------------------------------------------------------------


# torchrun's variables and their expressions in the global rank `r`
def _env_exprs(nproc: int) -> dict[str, str]:
    return {
        "RANK": "r",
        "ROLE_RANK": "r",
        "LOCAL_RANK": f"(r % {nproc})",
        "GROUP_RANK": f"(r // {nproc})",
        "NODE_RANK": f"(r // {nproc})",
    }


def _members(group: Any) -> tuple[str, list[str]] | None:
    """The member expressions of `group` as a `_m(k)` expression and the list, or None for
    the default group (its members are every rank: relabelling keeps it)."""
    import torch.distributed.distributed_c10d as c10d

    st = STATE
    assert st is not None
    if group is None or group is c10d.GroupMember.WORLD:
        return None
    with window():
        try:
            name = group.group_name
        except Exception:
            name = None
        k = st.torch_groups.get(name) if name is not None else None
        if k is None:
            ranks = c10d.get_process_group_ranks(group)
            k = st.member_list([str(int(x)) for x in ranks])
    return f"_m({k})", st.lists[k]


# Communication calls: their global and group-relative rank argument and its role
_ROLES = {
    "send": ("dst", "group_dst", "peer"),
    "isend": ("dst", "group_dst", "peer"),
    "recv": ("src", "group_src", "peer"),
    "irecv": ("src", "group_src", "peer"),
    "broadcast": ("src", "group_src", "root"),
    "reduce": ("dst", "group_dst", "root"),
    "gather": ("dst", "group_dst", "root"),
    "scatter": ("src", "group_src", "root"),
    "broadcast_object_list": ("src", "group_src", "root"),
    "gather_object": ("dst", "group_dst", "root"),
    "scatter_object_list": ("src", "group_src", "root"),
    "send_object_list": ("dst", "group_dst", "peer"),
    "recv_object_list": ("src", "group_src", "peer"),
}


def _global_expr(bound: inspect.BoundArguments, glob: str, rel: str) -> tuple[str, int] | None:
    """The expression and value of the call's global peer or root, if it names one; the
    expression is valid (an index into the world, or into the group) on every rank of the
    class, a condition added here. Outside that range torch or the dry-run does something
    else (raises, or a negative index counts from the end): the rank proves nothing then."""
    st = STATE
    assert st is not None
    args = bound.arguments
    g, gr = args.get(glob), args.get(rel)
    arg, members, size = (g, None, st.world) if g is not None else (gr, None, st.world)
    if g is None and gr is not None:
        members = _members(args.get("group"))
        with window():
            ranks = c10d_ranks(args["group"]) if members is not None else None
        size = len(ranks) if ranks is not None else st.world
    e = expr_of(arg) if arg is not None else None
    if e is None:
        return None
    value = plain(arg)
    if not 0 <= value < size:
        st.unproven = st.unproven or f"a peer or root outside its group ({value})"
        return None
    st.add(f"0 <= ({e}) < {size}")
    if g is not None and args.get("group") is not None:
        # a global rank on a subgroup: torch raises unless it is a member
        group = _members(args["group"])
        if group is not None:
            with window():
                inside = value in c10d_ranks(args["group"])
            expr = f"({e}) in {group[0]}"
            st.add(expr if inside else f"not ({expr})")
    if members is None:
        return e, value
    return f"{members[0]}[{e}]", ranks[value]


def _comm(name: str, orig: Any) -> Any:
    glob, rel, role = _ROLES[name]
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def call(*a: Any, **k: Any) -> Any:
        st = STATE
        if st is None or st.window:
            return orig(*(concrete(x) for x in a), **{n: concrete(v) for n, v in k.items()})
        try:
            bound = sig.bind(*a, **k)
        except TypeError:
            return orig(*(concrete(x) for x in a), **{n: concrete(v) for n, v in k.items()})
        found = _global_expr(bound, glob, rel)
        context = {role: found[0]} if found else {}
        if found:
            # whether the rank is the root (or its own peer: torch raises) decides what the
            # call does for it
            expr = f"(r) == ({found[0]})"
            st.add(expr if found[1] == st.rank else f"not ({expr})")
        for n, v in bound.arguments.items():
            bound.arguments[n] = plain(v) if n in (glob, rel) and found else concrete(v)
        with window(context):
            result = orig(*bound.args, **bound.kwargs)
        if name == "recv" and result is not None and found is not None:
            if result == found[1]:  # the sender's global rank
                return make(found[0], result)
            st.unproven = st.unproven or "recv returned another rank than its source"
        if name == "irecv" and found is not None and hasattr(result, "_source"):
            # `work.source_rank()`: the sender, group-relative, as the rank's expression
            members = _members(bound.arguments.get("group"))
            source = found[0] if members is None else f"{members[0]}.index({found[0]})"
            with window():
                group = bound.arguments.get("group")
                ranks = c10d_ranks(group) if members is not None else None
            expected = found[1] if ranks is None else ranks.index(found[1])
            if result._source == expected:
                result._source = make(source, result._source)
            else:
                st.unproven = st.unproven or "a receive's source is not its expression"
        return result

    return call


def _make_new_group(orig: Any) -> Any:
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def new_group(*a: Any, **k: Any) -> Any:
        st = STATE
        if st is None or st.window:
            return orig(*(concrete(x) for x in a), **{n: concrete(v) for n, v in k.items()})
        bound = sig.bind(*a, **k)
        for n, v in bound.arguments.items():
            if n != "ranks":
                bound.arguments[n] = concrete(v)
        ranks = bound.arguments.get("ranks")
        if ranks is None or any(expr_of(x) is None for x in ranks):  # every rank; or not ints
            bound.arguments["ranks"] = concrete(ranks)
            with window():
                return orig(*bound.args, **bound.kwargs)
        ranks = list(ranks)
        exprs = [expr_of(x) for x in ranks]
        values = [plain(x) for x in ranks]
        sort = bound.arguments.get("sort_ranks", True)
        order = sorted(range(len(values)), key=values.__getitem__) if sort else range(len(ranks))
        ordered = [exprs[i] for i in order]
        k_list = st.member_list(ordered)
        if not all(0 <= v < st.world for v in values) or len(set(values)) != len(values):
            st.unproven = st.unproven or "a group of ranks outside the world, or repeated"
        if any(type(x) is RankValue for x in ranks):
            if sort:
                st.add(f"_asc(_m({k_list}))")
            st.add(f"(r) in _m({k_list})" if st.rank in values else f"not ((r) in _m({k_list}))")
        else:
            st.add(f"(r) in _m({k_list})" if st.rank in values else f"not ((r) in _m({k_list}))")
        bound.arguments["ranks"] = values
        st.pending_members = ordered
        try:
            with window({"members": str(k_list)}):
                pg = orig(*bound.args, **bound.kwargs)
        finally:
            st.pending_members = None
        with contextlib.suppress(Exception):
            name = pg.group_name
            st.torch_groups[name] = k_list
        return pg

    return new_group


def _make_p2pop_init(orig: Any) -> Any:
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init(self: Any, *a: Any, **k: Any) -> None:
        st = STATE
        if st is None or st.window:
            orig(self, *(concrete(x) for x in a), **{n: concrete(v) for n, v in k.items()})
            return
        bound = sig.bind(self, *a, **k)
        found = _global_expr(bound, "peer", "group_peer")
        for n, v in bound.arguments.items():
            if n != "self":
                bound.arguments[n] = plain(v) if n in ("peer", "group_peer") else concrete(v)
        with window():
            orig(*bound.args, **bound.kwargs)
        if found is None:
            return
        members = _members(self.group)
        rel = found[0] if members is None else f"{members[0]}.index({found[0]})"
        self.group_peer = RankValue(rel, self.group_peer)
        self.peer = RankValue(found[0], self.peer)

    return init


def _make_group_rank(orig: Any) -> Any:
    @functools.wraps(orig)
    def get_group_rank(group: Any, global_rank: Any) -> Any:
        st = STATE
        if st is None or st.window or type(global_rank) is not RankValue:
            return orig(group, concrete(global_rank))
        members = _members(group)
        if members is None:
            return global_rank
        expr = f"({global_rank._e}) in {members[0]}"
        with window():
            inside = plain(global_rank) in [int(x) for x in c10d_ranks(group)]
        st.add(expr if inside else f"not ({expr})")
        with window():
            value = orig(group, plain(global_rank))
        return make(f"{members[0]}.index({global_rank._e})", value)

    return get_group_rank


def _make_global_rank(orig: Any) -> Any:
    @functools.wraps(orig)
    def get_global_rank(group: Any, group_rank: Any) -> Any:
        st = STATE
        if st is None or st.window or type(group_rank) is not RankValue:
            return orig(group, concrete(group_rank))
        members = _members(group)
        with window():
            value = orig(group, plain(group_rank))
        if members is None:
            return group_rank
        return make(f"{members[0]}[{group_rank._e}]", value)

    return get_global_rank


def c10d_ranks(group: Any) -> list[int]:
    import torch.distributed.distributed_c10d as c10d

    return list(c10d.get_process_group_ranks(group))


def _make_pg_rank(orig: Any) -> Any:
    def rank(self: Any) -> Any:
        value = orig(self)
        st = STATE
        if st is None or st.window or value < 0:
            return value
        import torch.distributed.distributed_c10d as c10d

        with window():
            default = c10d.GroupMember.WORLD
        if self is default:
            return RankValue("r", value)
        members = _members(self)
        if members is None:
            return RankValue("r", value)
        return make(f"{members[0]}.index(r)", value)

    return rank


def _make_environ(nproc: int) -> None:
    exprs = _env_exprs(nproc)
    base = type(os.environ)

    class Environ(base):  # type: ignore[misc, valid-type]
        def __getitem__(self, key: Any) -> Any:
            value = base.__getitem__(self, key)
            st = STATE
            if st is not None and key in exprs:
                with contextlib.suppress(ValueError):
                    st.add(f"{exprs[key]} == {int(value)}")
                    if len(st.escapes) < 8:
                        st.escapes.append(f"os.environ[{key!r}] at {_where()}")
            return value

    os.environ.__class__ = Environ


def _guard_entropy(st: _State) -> Any:
    """The rank's own randomness (`child._entropy_per_rank`) differs from rank to rank: a
    run that draws from it (before seeding) proves nothing about another rank."""
    import random

    import torch

    def drew(why: str) -> None:
        st.unproven = st.unproven or f"it drew from its own randomness ({why})"

    for owner, name in ((os, "urandom"), (random, "_urandom")):
        orig = getattr(owner, name)

        def guarded(n: int, _orig: Any = orig) -> bytes:
            drew("os.urandom")
            return _orig(n)

        setattr(owner, name, guarded)
    states: dict[str, Any] = {
        "random": (random.getstate, random.seed),
        "torch": (torch.default_generator.get_state, None),
    }
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        states["numpy"] = (np_random.get_state, np_random.seed)
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def state(k: str) -> Any:
        with unset_fake_temporarily():
            now = states[k][0]()
            if k == "torch":
                return now.numpy().tobytes()
            if k == "numpy":
                return repr([x.tobytes() if hasattr(x, "tobytes") else x for x in now])
            return now

    start = {k: state(k) for k in states}
    seeded: set[str] = set()

    def moved(k: str) -> bool:
        return state(k) != start[k]

    def on_seed(k: str) -> None:
        if k not in seeded and moved(k):
            drew(f"{k} before it was seeded")
        seeded.add(k)

    def wrap(owner: Any, name: str, k: str) -> None:
        orig = getattr(owner, name)

        @functools.wraps(orig)
        def seed(*a: Any, **kw: Any) -> Any:
            on_seed(k)
            return orig(*(plain(x) for x in a), **kw)

        setattr(owner, name, seed)

    wrap(random, "seed", "random")
    wrap(torch, "manual_seed", "torch")
    wrap(torch.random, "manual_seed", "torch")
    if np_random is not None:
        wrap(np_random, "seed", "numpy")

    def at_end() -> None:
        for k in states:
            if k not in seeded and moved(k):
                drew(f"an unseeded {k} generator")

    return at_end


def install(rank: int, world: int, nproc: int, device: str, recorder: Any) -> Any:
    """Track the rank in this process; returns what to call at the end (the payload)."""
    global STATE
    import torch
    import torch._C._distributed_c10d as cc
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    st = STATE = _State(rank, world, nproc)
    if device == "cuda":
        # the stand-in GPU of the rank is its local rank, which torch reports everywhere
        st.add(f"(r % {nproc}) == {rank % nproc}")
    for name in _ROLES:
        wrapped = _comm(name, getattr(c10d, name))
        for mod in (dist, c10d):
            setattr(mod, name, wrapped)
    wrapped_ng = _make_new_group(c10d.new_group)
    for mod in (dist, c10d):
        mod.new_group = wrapped_ng
    gr, glr = _make_group_rank(c10d.get_group_rank), _make_global_rank(c10d.get_global_rank)
    for mod in (dist, c10d):
        mod.get_group_rank, mod.get_global_rank = gr, glr
    c10d.P2POp.__init__ = _make_p2pop_init(c10d.P2POp.__init__)
    cc.ProcessGroup.rank = _make_pg_rank(cc.ProcessGroup.rank)
    orig_init = c10d.init_process_group

    @functools.wraps(orig_init)
    def init_process_group(*a: Any, **k: Any) -> Any:
        with window():
            return orig_init(*a, **k)

    for mod in (dist, c10d):
        mod.init_process_group = init_process_group
    _make_environ(nproc)
    _meshes(recorder)
    import torch.multiprocessing as mp

    spawn = mp.spawn

    def spawned(fn: Any, args: tuple = (), nprocs: int = 1, join: bool = True, **k: Any) -> Any:
        st.add(f"(r % {nproc}) == {rank % nproc}")  # the worker's index is the local rank
        return spawn(fn, args, nprocs, join, **k)

    mp.spawn = torch.multiprocessing.spawn = spawned
    mp.start_processes = lambda fn, args=(), nprocs=1, join=True, **k: spawned(
        fn, args, nprocs, join
    )
    at_end = _guard_entropy(st)

    def forking() -> None:  # what a child process decides from the rank is not seen here
        st.unproven = st.unproven or "it started processes of its own (os.fork)"

    os.register_at_fork(before=forking)
    torch.tensor = _concretising(torch.tensor)
    torch.as_tensor = _concretising(torch.as_tensor)

    send = recorder.send

    def annotated(msg: tuple) -> None:
        kind = msg[0]
        if kind == "a":
            ctx = st.contexts[-1] if st.contexts else {}
            note = {k: v for k, v in ctx.items() if k in ("peer", "root")}
            if note:
                st.actions[st.count] = note
            st.count += 1
        elif kind == "gc":
            if st.pending_members is not None:
                st.creations[st.creation_count] = st.member_list(st.pending_members)
                made = len(c10d._world.pg_names)  # torch's hashed name counts the groups
                if msg[1] == rankexpr.hashed_name(msg[2], made):
                    st.hashed[st.creation_count] = made
            st.creation_count += 1
        elif kind == "g" and st.pending_members is not None:
            st.groups[msg[1]] = st.member_list(st.pending_members)
        send(msg)

    recorder.send = annotated

    def finish() -> dict[str, Any]:
        at_end()
        return st.payload()

    return finish


def _mesh_dims(tensor: Any, rank: int, world: int) -> list[tuple[int, int]] | None:
    """(stride, size) of each dimension of a mesh holding `rank`, when every rank's coordinate
    there is `(x // stride) % size` and its slice along it is `x + (i - coordinate) * stride`
    — checked for every rank of the world, so that the expressions hold for any rank derived
    (a contiguous mesh and its slices, torchtitan's layout); None otherwise."""
    if rank not in tensor.flatten().tolist():
        return None
    idx = (tensor == rank).nonzero()[0].tolist()
    dims = []
    for j, n in enumerate(tensor.shape):
        line = tensor[tuple(slice(None) if k == j else c for k, c in enumerate(idx))].tolist()
        t = line[1] - line[0] if n > 1 else 1
        if t <= 0 or line != [line[0] + i * t for i in range(n)]:
            return None
        for x in range(world):
            c = (x // t) % n
            base = x - c * t
            if base < 0 or base + (n - 1) * t >= world:
                return None
        if (rank // t) % n != idx[j]:
            return None
        dims.append((t, n))
    return dims


def _express_mesh(mesh: Any, recorder: Any) -> None:
    """A DeviceMesh made (or sliced) inside a window: its coordinates and its groups as
    rank expressions (`_mesh_dims`); a mesh of another shape keeps its plain numbers, and the
    first use of one pins the rank."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    st = STATE
    assert st is not None
    with window(), unset_fake_temporarily():
        tensor = mesh.mesh.cpu()
        dims = _mesh_dims(tensor, st.rank, st.world)
        coords = mesh._coordinate_on_dim
        groups = [mesh.get_group(j) for j in range(tensor.dim())] if dims else []
    if dims is None or coords is None:
        return
    for j, (t, n) in enumerate(dims):
        c = f"((r//{t})%{n})"
        exprs = [f"((r-{c}*{t})+{i * t})" for i in range(n)]
        name = getattr(groups[j], "group_name", None)
        label = recorder.torch_names.get(name)
        if label is None or [st.rank - coords[j] * t + i * t for i in range(n)] != label[1]:
            return  # not the group the expressions give: the numbers stay plain
        k = st.member_list(exprs)
        st.torch_groups[name] = k
        if label[0] != "WORLD":
            st.groups[label[0]] = k
    mesh._coordinate_on_dim = tuple(
        RankValue(f"((r//{t})%{n})", v) for (t, n), v in zip(dims, coords, strict=True)
    )


def _meshes(recorder: Any) -> None:
    """`init_device_mesh`, a mesh's slices and flattened dimensions are made inside a window
    (torch's own `new_group` calls, every rank making every group in one order), then given
    rank expressions (`_express_mesh`)."""
    try:
        import torch.distributed.device_mesh as dm
    except ImportError:
        return
    orig_init = dm.init_device_mesh

    @functools.wraps(orig_init)
    def init_device_mesh(*a: Any, **k: Any) -> Any:
        with window():
            mesh = orig_init(*(concrete(x) for x in a), **{n: concrete(v) for n, v in k.items()})
        _express_mesh(mesh, recorder)
        return mesh

    dm.init_device_mesh = init_device_mesh
    import torch.distributed as dist

    if getattr(dist, "init_device_mesh", None) is orig_init:
        dist.init_device_mesh = init_device_mesh
    for name in ("_create_sub_mesh", "_create_flatten_mesh", "_flatten"):
        orig = getattr(dm.DeviceMesh, name, None)
        if orig is None:
            continue

        def make(orig: Any = orig) -> Any:
            @functools.wraps(orig)
            def sliced(self: Any, *a: Any, **k: Any) -> Any:
                with window():
                    mesh = orig(self, *(concrete(x) for x in a), **k)
                if mesh is not None:
                    _express_mesh(mesh, recorder)
                return mesh

            return sliced

        setattr(dm.DeviceMesh, name, make())


def _concretising(orig: Any) -> Any:
    """A tensor made from rank values holds their values (torch reads no other kind)."""

    def deep(x: Any) -> Any:
        if type(x) is RankValue:
            return x._concrete("a tensor's data")
        if type(x) in (list, tuple):
            return type(x)(deep(v) for v in x)
        return x

    @functools.wraps(orig)
    def make_tensor(data: Any, *a: Any, **k: Any) -> Any:
        return orig(deep(data), *a, **k)

    return make_tensor
