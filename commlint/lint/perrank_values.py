"""Values the per-rank evaluator (`perrank.py`) knows beyond plain Python: a command line's
defaults (`argparse`).

A program's command line is the same on every rank (torchrun hands every rank the same
arguments), so its defaults are uniform values: the sizes, counts and member lists they decide
are the ones the program runs with when it is launched as written. A flag whose value cannot be
known without the command line (a required option, a positional argument, a sub-command) stays
unknown.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

_PERRANK: dict[str, object] = {}


def _perrank(*names: str) -> tuple:
    """Names of `perrank_model` (the evaluator's values), looked up once: the origin
    functions run on every call the evaluator makes."""
    if not _PERRANK:
        from commlint.lint import perrank_model

        _PERRANK.update(vars(perrank_model))
    return tuple(_PERRANK[n] for n in names)


RANK_DESTS = frozenset({"rank", "local_rank", "global_rank", "node_rank", "process_index"})
WORLD_DESTS = frozenset({"world_size", "num_processes", "nprocs"})


@dataclass
class ArgParser:
    """An `argparse.ArgumentParser` (or one of its groups, which share its options)."""

    defaults: dict[str, object] = field(default_factory=dict)
    unknowable: bool = False  # sub-commands: which options exist depends on the command line


@dataclass
class ParserMethod:
    parser: ArgParser
    attr: str


def _dest(flags: list, kwargs: dict) -> str | None:
    dest = kwargs.get("dest")
    if isinstance(dest, str):
        return dest
    names = [f for f in flags if isinstance(f, str)]
    if not names:
        return None
    longs = [f for f in names if f.startswith("--")]
    name = (longs or names)[0].lstrip("-")
    return name.replace("-", "_")


def _default(ev, flags: list, kwargs: dict) -> object:
    from commlint.lint.perrank_model import UNK, Builtin

    positional = bool(flags) and isinstance(flags[0], str) and not flags[0].startswith("-")
    if kwargs.get("required") is True or (positional and kwargs.get("nargs") not in ("?", "*")):
        return UNK  # given on the command line: its value is not in the source
    action = kwargs.get("action")
    if action == "store_true":
        return kwargs.get("default", False)
    if action == "store_false":
        return kwargs.get("default", True)
    if "default" not in kwargs:
        return None
    value = kwargs["default"]
    kind = kwargs.get("type")
    if isinstance(value, str) and isinstance(kind, Builtin):
        # argparse converts a string default with the option's type
        try:
            return kind.fn(ev, [value], {}, None)
        except Exception:
            return UNK
    return value


def call_parser(ev, m: ParserMethod, args: list, kwargs: dict) -> object:
    """`parser.add_argument(...)`, `parser.parse_args()`, …, on rank `ev`."""
    from commlint.lint.perrank_model import UNK, Cls, Obj, guard

    p = m.parser
    if m.attr in ("add_argument", "set_defaults", "add_subparsers"):
        guard(p)
    if m.attr == "add_argument":
        dest = _dest(args, kwargs)
        if dest is not None:
            if dest in RANK_DESTS:
                p.defaults[dest] = ev.rank  # the launcher's: each rank's own
            elif dest in WORLD_DESTS:
                p.defaults[dest] = ev.world
            else:
                p.defaults[dest] = _default(ev, args, kwargs)
        return None
    if m.attr in ("add_argument_group", "add_mutually_exclusive_group"):
        return p
    if m.attr == "set_defaults":
        p.defaults.update(kwargs)
        return None
    if m.attr == "add_subparsers":
        p.unknowable = True
        return UNK
    if m.attr in ("parse_args", "parse_known_args", "parse_intermixed_args"):
        if p.unknowable or (args and args[0] not in (None, [])):
            return UNK  # sub-commands, or arguments the program builds itself
        ns = Obj(Cls("Namespace", {}, []), dict(p.defaults))
        return (ns, []) if m.attr == "parse_known_args" else ns
    return UNK


# ---------------------------------------------------------------------------- value origins
# An unknown value (a loss, a batch, a tensor drawn from a generator) still has an origin: the
# calls and the known values it was computed from. Each rank's evaluation gives every such
# value a fingerprint, a hash over its ingredients; the ranks are evaluated one after another
# in one process, so a value computed alike on every rank gets the same fingerprint on each.
# When a value that decides communication differs between ranks (a generator seeded with the
# rank, a shard chosen by the rank, a file named after it flow into it) it is rank-local: the
# ranks may decide differently. A value out of a collective over every rank (all_reduce,
# broadcast, all_gather) gets a fingerprint of its own, the same on every rank: uniform.
# Ingredients whose origin is not known count alike on every rank, so the evaluation only ever
# claims a difference it has seen, never that two ranks agree.

RANDOM = frozenset(
    {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial", "rand_like"}
    | {"randn_like", "randint_like", "poisson", "random", "uniform", "choice", "shuffle"}
    | {"sample", "gauss"}
)
SEEDS = frozenset(
    {"torch.manual_seed", "random.seed", "numpy.random.seed", "torch.random.manual_seed"}
)
# collectives whose result is the same on every member (the in-place buffer or output list)
UNIFORM_RESULT = {
    "all_reduce": 0,
    "broadcast": 0,
    "all_gather": 0,
    "all_gather_into_tensor": 0,
    "all_gather_object": 0,
    "broadcast_object_list": 0,
}


class Fingerprints:
    """The ingredients of every fingerprint one file's evaluation made, to say afterwards
    where two ranks' values first differ."""

    def __init__(self) -> None:
        self.nodes: dict[int, tuple[int, object, tuple]] = {}
        self.data: set[int] = set()  # the fingerprints of tensors and batches: data

    def node(self, line: int, label: object, children: tuple) -> int:
        h = hash((label, line, children))
        if len(self.nodes) < 200_000:
            self.nodes.setdefault(h, (line, label, children))
        return h

    def uniform(self, fp: int, depth: int = 0) -> bool:
        """The value is proved the same on every rank: computed only from collectives' results
        (all_reduce, broadcast, ...) and constants, with no ingredient of unknown origin and no
        random draw. (Equal fingerprints alone prove nothing: an unknown counts alike on every
        rank.)"""
        return self._uniform(fp, depth) is True

    def _uniform(self, fp: int, depth: int) -> bool | None:
        """True: uniform and reads a collective; None: constants only; False: not proved."""
        node = self.nodes.get(fp)
        if node is None or depth > 40:
            return False
        _line, label, kids = node
        if isinstance(label, tuple) and label[:1] == ("collective",):
            return True
        if isinstance(label, tuple) and label[:1] == ("v",):
            return None
        if isinstance(label, tuple) and label[:1] in (("random",), ("exchanged",)):
            return False
        seen = False
        for k in kids:
            if k is None:
                return False
            got = self._uniform(k, depth + 1)
            if got is False:
                return False
            seen = seen or got is True
        return True if seen else None

    def exchanged(self, fp: int, depth: int = 0) -> bool:
        """Something below was received from the peers by an all-to-all."""
        node = self.nodes.get(fp)
        if node is None or depth > 40:
            return False
        if isinstance(node[1], tuple) and node[1][:1] == ("exchanged",):
            return True
        return any(k is not None and self.exchanged(k, depth + 1) for k in node[2])

    def reads_data(self, fp: int, depth: int = 0) -> bool:
        """The value was computed from data (a tensor, a batch, a loss) somewhere below."""
        if fp in self.data:
            return True
        node = self.nodes.get(fp)
        if node is None or depth > 40:
            return False
        return any(k is not None and self.reads_data(k, depth + 1) for k in node[2])

    def first_difference(self, a: int, b: int) -> tuple[int, str, str] | None:
        """(line, a's value, b's value) of the deepest known value where a and b differ."""
        return self.difference(a, b)[0]

    def through_data(self, a: int, b: int) -> bool:
        """The values part through data (a tensor, a batch): not only through the rank handed
        to a call the evaluator cannot follow (`evaluator.participates(rank)`)."""
        return self.difference(a, b)[1]

    def difference(self, a: int, b: int) -> tuple[tuple[int, str, str] | None, bool]:
        found: tuple[int, str, str] | None = None
        data = False
        for _ in range(200):
            data = data or a in self.data or b in self.data
            found, done = self._step(a, b, found)
            if done is None:
                return found, data
            a, b = done
        return found, data

    def _step(self, a: int, b: int, found) -> tuple:
        """One step down the first differing ingredient: (found, the next pair or None)."""
        na, nb = self.nodes.get(a), self.nodes.get(b)
        if na is None or nb is None:
            return found, None
        if isinstance(na[1], tuple) and na[1][:1] == ("v",) and nb[1][:1] == ("v",):
            line = na[0] or (found[0] if found else 0)
            return (line, na[1][1], nb[1][1]), None
        if na[1] != nb[1] or len(na[2]) != len(nb[2]):
            return found, None
        pairs = [(x, y) for x, y in zip(na[2], nb[2], strict=True) if x != y]
        if not pairs or pairs[0][0] is None or pairs[0][1] is None:
            return found, None
        if na[0]:
            found = (na[0], "", "")
        return found, pairs[0]


def fp_of(ev, v: object, line: int = 0, depth: int = 0) -> int | None:
    """The fingerprint of a value on rank `ev` (None: its origin is not known)."""
    Derived, Interval, Tensor, _is_known = _perrank("Derived", "Interval", "Tensor", "_is_known")

    if isinstance(v, Derived | Tensor | Interval):
        return v.fp
    fps = ev.ev.fps
    if isinstance(v, list | tuple) and depth < 3:
        kids = tuple(fp_of(ev, x, line, depth + 1) for x in v[:32])
        if all(k is None for k in kids):
            return None
        return fps.node(line, "seq", kids)
    if isinstance(v, dict) and depth < 3 and len(v) <= 32:
        kids = tuple(fp_of(ev, x, line, depth + 1) for x in v.values())
        if all(k is None for k in kids):
            return None
        return fps.node(line, "map", kids)
    if _is_known(v) and isinstance(v, int | float | str | bool | type(None)):
        text = repr(v)
        return fps.node(line, ("v", text if len(text) <= 60 else text[:57] + "..."), ())
    return None


def _site(ev, line: int) -> int | str:
    """A line of the evaluated file, or `file.py:line` of a followed one."""
    cur = getattr(ev, "cur", None)
    return line if cur is None or cur is ev.ev else f"{cur.short}:{line}"


def derived(ev, label: object, parts: tuple, line: int = 0) -> object:
    """An unknown computed from `parts`: a Derived when any part has an origin, else UNK."""
    UNK, Derived = _perrank("UNK", "Derived")

    line = _site(ev, line or ev.line)
    kids = tuple(fp_of(ev, p, line) for p in parts)
    if all(k is None for k in kids):
        return UNK
    return Derived(ev.ev.fps.node(line, label, kids))


def with_origin(ev, result: object, label: object, parts: tuple, line: int = 0) -> object:
    """`result` (an unknown, or a tensor whose origin is not recorded) with its ingredients."""
    UNK, Tensor = _perrank("UNK", "Tensor")

    if result is UNK:
        return derived(ev, label, parts, line)
    if isinstance(result, Tensor) and result.fp is None:
        d = derived(ev, label, parts, line)
        if d is not UNK:
            ev.ev.fps.data.add(d.fp)
            return replace(result, fp=d.fp)
    return result


def call_origin(ev, result: object, func: object, args: list, kwargs: dict, e) -> object:
    """A call's unknown result takes its ingredients: the receiver, the arguments, and the
    random state of the rank for a draw from the default generator."""
    UNK, Derived, Mod, Tensor, TensorMethod = _perrank(
        "UNK", "Derived", "Mod", "Tensor", "TensorMethod"
    )

    if not (result is UNK or (isinstance(result, Tensor) and result.fp is None)):
        return result
    recv: object = None
    if isinstance(func, TensorMethod):
        recv = func.tensor
    elif isinstance(func, Derived):
        recv = func
    parts = [recv, *args, *(kwargs[k] for k in sorted(kwargs))]
    random = isinstance(func, Mod) and func.qname.rsplit(".", 1)[-1] in RANDOM
    if random and "generator" not in kwargs:
        parts.append(ev.rng)
    label: tuple = ("random" if random else "call", e.col_offset)
    if random:
        # the k-th draw of a generator is not its (k+1)-th: rows drawn in a loop and then
        # sliced by the rank (`rows[rank::world]`) are different data on each rank
        key = fp_of(ev, kwargs.get("generator"), e.lineno) if "generator" in kwargs else -1
        draws = ev.__dict__.setdefault("draws", {})
        draws[key] = draws.get(key, 0) + 1
        label = (*label, draws[key])
    return with_origin(ev, result, label, tuple(parts), e.lineno)


def seed(ev, qname: str, args: list, kwargs: dict) -> bool:
    """`torch.manual_seed(s)`, `random.seed(s)`: the rank's default generator now draws from
    `s` (a rank-dependent seed makes every later draw rank-local)."""
    if qname not in SEEDS:
        return False
    ev.rng = args[0] if args else kwargs.get("seed")
    return True


def attribute_of(ev, base: object, attr: str) -> object:
    """An attribute of an unknown whose origin is known."""
    return derived(ev, ("attr", attr), (base,))


def element(ev, v: object, k: int) -> object:
    """The k-th element of an unknown sequence (`a, b = t.tolist()`)."""
    return derived(ev, ("elt", k), (v,))


def under(ev, cond: object, line: int) -> object:
    """What a statement skipped under an unknown condition assigns: it depends on it."""
    return derived(ev, "under", (cond,), line)


def after_exchange(ev, args: list, kwargs: dict, line: int) -> None:
    """`all_to_all_single(out, inp, ...)`: `out` now holds what the peers sent, different on
    each rank but no longer computed from this rank's own data."""
    from commlint.lint.perrank_model import Tensor, guard

    buf = args[0] if args else kwargs.get("output")
    if isinstance(buf, Tensor):
        guard(buf)
        buf.fp = ev.ev.fps.node(_site(ev, line), ("exchanged", "all_to_all", ev.rank), ())


def local_splits(fe, world: int, per_rank: list[list[tuple[int, int | None]]]) -> int | None:
    """The line of an `all_to_all_single` whose output split sizes every rank computed from
    its own data (different on each rank, through no exchange with the peers): what a rank
    expects from rank j is then not what rank j sends it, but a guess. None when there is
    none."""
    if len(per_rank) != world or not per_rank[0]:
        return None
    for k, (line, fp0) in enumerate(per_rank[0]):
        fps = [fp0]
        for r in range(1, world):
            if k >= len(per_rank[r]) or per_rank[r][k][0] != line:
                return None
            fps.append(per_rank[r][k][1])
        if any(fp is None or not fe.fps.reads_data(fp) for fp in fps):
            continue
        if len(set(fps)) > 1 and not any(fe.fps.exchanged(fp) for fp in fps):
            return line
    return None


def after_collective(
    ev, op: str, args: list, kwargs: dict, line: int, node: ast.Call | None = None
) -> None:
    """A collective over every member leaves the same value on each: its buffers (or its
    output list) get one fingerprint, the same on every rank. A buffer the evaluator holds
    as an unknown (`flag = (x.sum() > 0).float()`) is rebound, by name, to that value."""
    from commlint.lint.perrank_model import Derived, Tensor, guard

    pos = UNIFORM_RESULT.get(op)
    if pos is None:
        return
    buf = args[pos] if pos < len(args) else None
    for key in ("tensor", "tensor_list", "object_list", "output_tensor", "output"):
        if buf is None:
            buf = kwargs.get(key)
    line = _site(ev, line)
    mark = ev.ev.fps.node(line, ("collective", op), ())
    if isinstance(buf, Tensor):
        guard(buf)
        buf.fp = mark
    elif isinstance(buf, list):
        guard(buf)
        for k, x in enumerate(buf):
            item = ev.ev.fps.node(line, ("collective", op, k), ())
            if isinstance(x, Tensor):
                guard(x)
                x.fp = item
            else:
                buf[k] = Derived(item)
    elif (
        isinstance(buf, Derived)
        and node is not None
        and pos < len(node.args)
        and isinstance(node.args[pos], ast.Name)
        and node.args[pos].id in ev.env
    ):
        ev.env[node.args[pos].id] = Derived(mark)


# ---------------------------------------------------------------------------- steering
@dataclass
class Steering:
    """Every rank stopped at one test of an unknown value that decides its communication, and
    the ranks' values have different origins: the ranks can decide differently."""

    cond_line: int  # the test
    exit_line: int  # the `break`/`return`/`continue` it decides (= cond_line for an if/while)
    kind: str  # "break", "continue", "return", "if", "while"
    text: str  # the test's source
    ranks: dict[int, int]  # rank -> its value's fingerprint
    origin: tuple[int, str, str] | None  # (line, one rank's value, another's) where they differ
    pair: tuple[int, int]  # the two ranks `origin` compares
    where: object | None = None  # the followed file of the test (None: the evaluated file)


def steering(fe, world: int, stops: dict) -> Steering | None:
    """`stops`: rank -> (Abort, fingerprint). A finding when every rank stopped at the same
    test, the test decides what the rank communicates, and two ranks' values differ."""
    if len(stops) != world:
        return None
    sites = {(ab.cond, ab.line, id(ab.unit)) for ab, _fp in stops.values()}
    if len(sites) != 1:
        return None
    cond_line, exit_line, _unit = sites.pop()
    where = next(iter(stops.values()))[0].unit  # a followed file, or None: the evaluated one
    fps = {r: fp for r, (_ab, fp) in stops.items()}
    if len(set(fps.values())) < 2:
        return None  # the same on every rank: unknown, but every rank decides alike
    sharded = all(ab.sharded for ab, _fp in stops.values())
    kind, text = _decision(where if where is not None else fe, cond_line, exit_line, sharded)
    if kind is None:
        return None
    first = min(fps)
    other = next(r for r in sorted(fps) if fps[r] != fps[first])
    if not fe.fps.through_data(fps[first], fps[other]):
        return None  # only the rank itself, through a call not followed: the rank rules judge
    origin = fe.fps.first_difference(fps[first], fps[other])
    return Steering(cond_line, exit_line, kind, text, fps, origin, (first, other), where)


def partial_steering(fe, world: int, stops: dict, decided: dict) -> Steering | None:
    """Some ranks stopped at one test of a value computed from their own data; every other
    rank ran through that same test with a value it knew (`decided`: rank -> the values it
    took there). A value one rank knows without data and another computes from its data
    (the loss only the last pipeline stage has) can fall on the other side of the test: the
    ranks can decide differently."""
    if not stops or len(stops) == world or len(stops) + len(decided) != world:
        return None
    if any(ab.unit is not None for ab, _fp in stops.values()):
        return None  # (a followed file's lines are not told apart from the evaluated one's)
    sites = {(ab.cond, ab.line) for ab, _fp in stops.values()}
    if len(sites) != 1:
        return None
    cond_line, exit_line = sites.pop()
    fps = fe.fps
    if any(not fps.reads_data(fp) or fps.uniform(fp) for _ab, fp in stops.values()):
        return None
    if not all(vals for vals in decided.values()):
        return None  # a rank that never reached the test
    kind, text = _decision(fe, cond_line, exit_line)
    if kind is None:
        return None
    ranks = {r: fp for r, (_ab, fp) in stops.items()}
    for r, vals in decided.items():
        ranks[r] = fps.node(cond_line, ("v", repr(sorted(vals))), ())
    known = min(decided)
    local = min(stops)
    shown = "/".join(str(v) for v in sorted(decided[known]))
    origin = (cond_line, shown, "computed from its own data")
    return Steering(cond_line, exit_line, kind, text, ranks, origin, (known, local), None)


def assumed_steering(fe, world: int, assumed: list[dict]) -> Steering | None:
    """A test the taint rules found uniform (taken as true on every rank, `truth`) whose value
    the ranks computed from ingredients that differ through data (a generator seeded with the
    rank: `torch.rand(1, generator=g).item() < p` in a forward): the ranks can decide it
    differently. Reported as a test of a rank-local value when it decides an exit."""
    if len(assumed) != world or not assumed[0]:
        return None
    for key, (unit, fp0) in sorted(assumed[0].items(), key=lambda kv: kv[0][1]):
        fps = {0: fp0}
        for r in range(1, world):
            got = assumed[r].get(key)
            if got is None:
                break
            fps[r] = got[1]
        if len(fps) != world or len(set(fps.values())) < 2:
            continue
        first = 0
        other = next(r for r in sorted(fps) if fps[r] != fps[first])
        if not fe.fps.through_data(fps[first], fps[other]):
            continue
        line = key[1]
        where = None if unit is fe else unit
        exit_line = _exit_under(where if where is not None else fe, line)
        kind, text = _decision(where if where is not None else fe, line, exit_line)
        if kind is None:
            continue
        origin = fe.fps.first_difference(fps[first], fps[other])
        return Steering(line, exit_line, kind, text, fps, origin, (first, other), where)
    return None


def _exit_under(fe, cond_line: int) -> int:
    """The line of the `break`/`continue`/`return` directly in the body of the `if` at
    `cond_line` (the `if` itself when there is none)."""
    for n in fe.of_type(ast.If):
        if n.test.lineno == cond_line:
            for s in n.body:
                if isinstance(s, ast.Break | ast.Continue | ast.Return):
                    return s.lineno
    return cond_line


def _decision(fe, cond_line: int, exit_line: int, sharded: bool = False) -> tuple[str | None, str]:
    """(kind, source) of the test at `cond_line`: what it decides ("break", "continue",
    "return", "if", "while"), None when it decides no communication. `sharded`: the exit
    skips calls of modules the rank sharded (their forward all-gathers), which the source
    alone does not show."""
    import ast

    test = None
    for n in sorted(fe.of_type(ast.If, ast.While), key=lambda n: (n.lineno, n.col_offset)):
        if n.test.lineno == cond_line:
            test = n
            break
    if test is None:
        return None, ""
    text = ast.unparse(test.test)
    if exit_line != cond_line:
        for n in ast.walk(test):
            if isinstance(n, ast.Break | ast.Continue | ast.Return) and n.lineno == exit_line:
                skips = sharded or _skips_communication(fe, test, n)
                return (type(n).__name__.lower() if skips else None), text
        return None, text
    if isinstance(test, ast.While):
        return "while", text
    if _arm_comms(fe, test.body) == _arm_comms(fe, test.orelse):
        return None, text  # both arms communicate alike: the test decides nothing
    return "if", text


def _skips_communication(fe, test, exit_node) -> bool:
    """The exit skips communication: the loop it leaves (`break`, `continue`) communicates,
    or (`return`) so does the rest of its function or a loop around it there."""
    import ast

    loops = [
        n
        for n in fe.of_type(ast.For, ast.While, ast.AsyncFor)
        if n.lineno <= exit_node.lineno <= (n.end_lineno or n.lineno)
    ]
    if not isinstance(exit_node, ast.Return):
        return bool(loops) and fe.communicates(max(loops, key=lambda n: n.lineno))
    fns = [
        n
        for n in fe.of_type(ast.FunctionDef, ast.AsyncFunctionDef)
        if n.lineno <= exit_node.lineno <= (n.end_lineno or n.lineno)
    ]
    if not fns:
        return False
    fn = max(fns, key=lambda n: n.lineno)
    end = test.end_lineno or test.lineno
    if any(end < line <= (fn.end_lineno or line) for line in fe.comm_lines):
        return True
    inner = [n for n in loops if n.lineno > fn.lineno]
    return any(fe.communicates(n) for n in inner)


def _arm_comms(fe, stmts: list) -> list[str]:
    """The communicating calls of one arm of an `if`, by name, in order."""
    import ast

    out = []
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Call) and (n.lineno, n.col_offset + 1) in fe.comm_sites:
                out.append(ast.unparse(n.func))
    return out


# ---------------------------------------------------------------------------- data pipelines
# A loader's batch count decides how often a training loop's collectives run. When the
# dataset's length is known (a list, a tensor, a class whose `__len__` the evaluator can run)
# and the sharding is the program's own (`Subset` of per-rank indices) or a
# `DistributedSampler` (equal counts on every rank), the count is computed per rank: one rank
# with a batch more than another is a hang the graph checker finds.
MAX_BATCHES = 512  # longer loaders stay one symbolic iteration (today's approximation)


@dataclass
class Sized:
    """A dataset or sampler of known length (`Subset`, `DistributedSampler`, `TensorDataset`)."""

    n: int
    fp: int | None = None


def length(ev, v: object) -> int | None:
    """`len(v)` when the evaluator can know it."""
    from commlint.lint.perrank_model import Fn, Obj, Tensor, _class_attr

    if isinstance(v, list | tuple | range | str | dict | set | frozenset):
        return len(v)
    if isinstance(v, Tensor):
        return v.shape[0] if v.shape else None
    if isinstance(v, Sized):
        return v.n
    if isinstance(v, Obj):
        meth = _class_attr(v.cls, "__len__")
        if isinstance(meth, Fn):
            n = ev.call_fn(Fn(meth.node, meth.globals, meth.defaults, meth.qualname, v), [], {}, 0)
            return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
        # an IterableDataset: as many items as its `__iter__` yields (each rank's own stream)
        meth = _class_attr(v.cls, "__iter__")
        if isinstance(meth, Fn):
            items = ev.generate(replace(meth, bound=v))
            return len(items) if items is not None else None
    return None


def data_call(ev, name: str, args: list, kwargs: dict, line: int) -> object:
    """`Subset`, `TensorDataset`, `DistributedSampler`, `DataLoader` of known length; else
    NotImplemented (the evaluator's other rules decide)."""
    last = name.rsplit(".", 1)[-1]
    if not name.startswith("torch.utils.data") or last not in DATA_CALLS:
        return NotImplemented
    return DATA_CALLS[last](ev, args, kwargs, line)


def _subset(ev, args: list, kwargs: dict, line: int) -> object:
    from commlint.lint.perrank_model import UNK

    indices = args[1] if len(args) > 1 else kwargs.get("indices")
    n = length(ev, indices)
    if n is None:
        return UNK
    ds = args[0] if args else kwargs.get("dataset")
    return Sized(n, fp_of(ev, (ds, indices), line))


def _tensor_dataset(ev, args: list, kwargs: dict, line: int) -> object:
    from commlint.lint.perrank_model import UNK

    n = length(ev, args[0]) if args else None
    return Sized(n, fp_of(ev, tuple(args), line)) if n is not None else UNK


def _distributed_sampler(ev, args: list, kwargs: dict, line: int) -> object:
    from commlint.lint.perrank_model import UNK

    ds = args[0] if args else kwargs.get("dataset")
    n = length(ev, ds)
    replicas = args[1] if len(args) > 1 else kwargs.get("num_replicas", ev.world)
    rank = args[2] if len(args) > 2 else kwargs.get("rank", ev.rank)
    drop = kwargs.get("drop_last", False)
    if n is None or not isinstance(replicas, int) or replicas <= 0 or not isinstance(drop, bool):
        return UNK
    # padded to equal counts (or cut, with drop_last): the same on every replica
    count = n // replicas if drop else -(-n // replicas)
    return Sized(count, fp_of(ev, (ds, rank), line))


def _data_loader(ev, args: list, kwargs: dict, line: int) -> object:
    from commlint.lint.perrank_model import UNK, Derived

    ds = args[0] if args else kwargs.get("dataset")
    bs = args[1] if len(args) > 1 else kwargs.get("batch_size", 1)
    drop = kwargs.get("drop_last", False)
    if kwargs.get("batch_sampler") is not None or not isinstance(drop, bool):
        return UNK
    sampler = kwargs.get("sampler")
    n = length(ev, sampler if sampler is not None else ds)
    if n is None or not isinstance(bs, int) or isinstance(bs, bool) or bs <= 0:
        return UNK
    batches = n // bs if drop else -(-n // bs)
    if batches > MAX_BATCHES:
        return UNK
    source = fp_of(ev, (ds, sampler), line)
    kids = (source,)
    # each batch: an unknown of this loader's data (rank-local when its shard is)
    out: list = []
    for k in range(batches):
        if source is None:
            out.append(UNK)
            continue
        fp = ev.ev.fps.node(line, ("batch", k), kids)
        ev.ev.fps.data.add(fp)
        out.append(Derived(fp))
    return out


DATA_CALLS = {
    "Subset": _subset,
    "TensorDataset": _tensor_dataset,
    "DistributedSampler": _distributed_sampler,
    "DataLoader": _data_loader,
}
