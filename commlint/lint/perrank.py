"""Per-rank evaluation: run each rank's communication with the rank and world size concrete.

The taint rules (`branches.py`) reason about *all* ranks at once and must stay silent when a
condition's value is not known. Most programs, though, decide their communication from the
rank, the world size and constants: `if rank < world - 1: dist.send(x, rank + 1)`. This module
interprets a file's entry points (its `if __name__ == "__main__":` block, else the functions
that communicate and that nothing in the file calls) once per rank for a few world sizes, with
the stdlib `ast` (never importing or running user code), and records what each rank would do
on the network as a `Trace` (`source: static`, sites = source lines). The same graph checker
that judges dry-runs and plans judges it.

Soundness first: a rank whose path depends on a value the interpreter cannot know (data, an
opaque call that communicates, a loop without a decidable bound, an unknown group or peer)
abandons the whole world size — the taint rules decide there. Only a trace in which every rank
ran to its end or to a `raise` is checked.
"""

from __future__ import annotations

import ast
import contextlib
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath

from commlint.lint import perrank_values as values
from commlint.lint.ir import CallSite, Comm, FileFacts, iter_nodes
from commlint.lint.perrank_pipelining import (
    MULTI,
    SINGLE,
    Schedule,
    ScheduleMethod,
    Stage,
    step_actions,
)
from commlint.lint.perrank_units import uniform_conditions
from commlint.lint.table import ApiTable

DEFAULT_WORLD_SIZES = (2, 4, 8)
MAX_WORLD = 16  # revealed sizes above this are not evaluated (ranks × steps cap)
MAX_STEPS = 20_000  # statements + loop iterations per rank and entry
MAX_ACTIONS = 2_000  # communication actions per rank and entry
MAX_DEPTH = 24  # interpreted call depth
MAX_WORK = 30_000  # statements over every rank, world size and entry of one file
MAX_ENTRIES = 12  # entry points evaluated per file


class Unknown:
    """A value the interpreter does not know (data, an opaque call, a parameter)."""

    _inst: Unknown | None = None

    def __new__(cls) -> Unknown:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "?"


UNK = Unknown()


class Derived(Unknown):
    """An unknown whose origin is known: `fp` fingerprints what it was computed from
    (`perrank_values`), so that two ranks' values can be told apart."""

    def __new__(cls, fp: int) -> Derived:
        inst = object.__new__(cls)
        inst.fp = fp
        return inst

    def __repr__(self) -> str:
        return f"?{self.fp & 0xFFFF:04x}"


class Abort(Exception):
    """This rank's path cannot be decided: the world size is not evaluated."""

    def __init__(self, reason: str, line: int = 0, steer: object = None, cond: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.steer = steer  # the unknown value that decides, when its origin is known
        self.cond = cond or line  # the line of the condition that tests it
        self.unit: object | None = None  # the followed file it stopped in (None: the evaluated)


class Stop(Exception):
    """The rank stops: an exception nobody catches, or `sys.exit`."""

    def __init__(self, kind: str, line: int, exc: str = "") -> None:
        super().__init__(kind)
        self.kind = kind
        self.line = line
        self.exc = exc


class _Return(Exception):
    def __init__(self, value: object) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass
class Tensor:
    shape: tuple[int, ...] | None = None
    dtype: str | None = "float32"
    lo: float | None = None  # every element's value lies in [lo, hi] (torch.rand: [0, 1))
    hi: float | None = None
    fp: int | None = None  # its origin (`perrank_values.fp_of`), when known


@dataclass(frozen=True)
class Group:
    name: str
    members: tuple[int, ...]


@dataclass
class Work:
    handles: list[str]


@dataclass(frozen=True)
class Mod:
    """A module or a name inside one, by qualified name (`torch.distributed.send`)."""

    qname: str


@dataclass
class Fn:
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    globals: dict
    defaults: dict[str, object]
    qualname: str
    bound: object | None = None
    only_rank: int | None = None  # a rank-zero-only decorator
    unit: object | None = None  # the followed file it is defined in (None: the evaluated one)


@dataclass
class ProjMod:
    """A module of the project, followed: its top level as this rank executed it."""

    name: str
    globals: dict


@dataclass
class Cls:
    name: str
    attrs: dict
    bases: list


@dataclass
class Obj:
    cls: Cls
    attrs: dict = field(default_factory=dict)


@dataclass
class P2P:
    op: str
    tensor: object
    peer: object
    group: object
    tag: int


@dataclass
class Interval:
    lo: float
    hi: float


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


RANK_TRUE_ZERO = _words(
    "is_main_process is_local_main_process is_world_process_zero is_local_process_zero "
    "is_global_zero is_local_zero is_master is_rank_zero is_rank_0 is_main main_process"
)
RANK_ATTRS = frozenset(
    {"rank", "global_rank", "process_index", "local_rank", "local_process_index"}
)
WORLD_ATTRS = frozenset({"world_size", "num_processes"})
RANK_ENV = frozenset(
    {"RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK"}
)
WORLD_ENV = frozenset({"WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"})
DTYPES = _words(
    "float32 float float64 double float16 half bfloat16 int64 long int32 int int16 int8 uint8 bool"
)
DTYPE_METHODS = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "bool": "bool",
}
SHAPE_KEEPING = _words(
    "clone detach contiguous cpu cuda abs neg exp tanh relu sigmoid sqrt pow mul add sub div "
    "mul_ add_ sub_ div_ copy_ zero_ fill_ normal_ uniform_ requires_grad_ clamp clamp_ softmax "
    "log_softmax"
)
REDUCING = frozenset({"sum", "mean", "max", "min", "var", "std", "norm", "prod", "amax", "amin"})
# torch creators whose positional arguments are the shape
CREATORS = frozenset({"empty", "zeros", "ones", "randn", "rand", "randint_like", "full"})
# payload positions of each op: (input tensor position, output position)
PAYLOAD = {
    "all_reduce": 0,
    "broadcast": 0,
    "reduce": 0,
    "send": 0,
    "recv": 0,
    "isend": 0,
    "irecv": 0,
    "all_gather": 1,
    "gather": 0,
    "scatter": 0,
    "reduce_scatter": 0,
}
OP_NAMES = {
    "all_gather_object": "all_gather",
    "gather_object": "gather",
    "broadcast_object_list": "broadcast",
    "scatter_object_list": "scatter",
    "send_object_list": "send",
    "recv_object_list": "recv",
    "all_gather_object (checkpoint planning)": "all_gather",
}
TRACE_OPS = _words(
    "send recv isend irecv all_reduce all_gather reduce_scatter broadcast reduce gather scatter "
    "all_to_all barrier"
)
BIN_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
CMP_OPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
PLAIN = (int, float, str, bool, type(None), tuple, list, dict, range, set, frozenset, bytes)
SAFE_METHODS = {
    list: {"append", "extend", "index", "count", "copy", "pop", "insert", "reverse"},
    dict: {"get", "keys", "values", "items", "copy", "setdefault", "update", "pop"},
    str: {
        "format",
        "join",
        "split",
        "strip",
        "startswith",
        "endswith",
        "lower",
        "upper",
        "replace",
    },
    tuple: {"index", "count"},
    range: {"index", "count"},
    set: {"add", "copy", "union"},
}
NPROC = re.compile(r"nproc[-_]per[-_]node[\s=]+(\d+)")
NPROCS = re.compile(r"nprocs\s*=\s*(\d+)")
MESH = re.compile(r"init_device_mesh\([^()]*?\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?,?\)")


def _is_known(*vals: object) -> bool:
    return all(v is not UNK and isinstance(v, PLAIN) for v in vals)


# ---------------------------------------------------------------------------- the interpreter
class Rank:
    """One rank's run of one entry point at one world size."""

    def __init__(self, ev: FileEval, rank: int, world: int) -> None:
        self.ev = ev
        self.rank = rank
        self.world = world
        self.actions: list[dict] = []
        self.steps = 0
        self.depth = 0
        self.stack: list[tuple[str, str, int]] = []  # (function, caller's file, call line)
        self.groups: list[Group] = []
        self.handle_count = 0
        self.batch_count = 0
        self.decided: dict[int, set[bool]] = {}  # condition line -> values it took
        self.end: tuple[str, int, str] | None = None
        self.env: dict = {}  # the environment of the call being evaluated
        self.fn_nodes: list[ast.AST] = []  # the functions being evaluated, innermost last
        self.cur = ev  # the file whose code runs now (the evaluated one, or a followed one)
        self.g: dict = ev.globals  # that file's module globals
        self.modules: dict[str, ProjMod | None] = {}  # followed modules, as this rank ran them
        self.line = 0  # the statement being evaluated
        self.rng: object = None  # the seed of the default random generators

    # ------------------------------------------------------------------ helpers
    def tick(self, line: int) -> None:
        self.steps += 1
        self.ev.work += 1
        self.line = line
        if self.steps > MAX_STEPS or self.ev.work > MAX_WORK:
            raise Abort("evaluation budget exhausted", line)

    def truth(self, v: object, node: ast.AST) -> bool:
        line = getattr(node, "lineno", 0)
        if isinstance(v, Unknown | Tensor | Interval | Mod | Work):
            if line in self.cur.uniform_lines:
                # the same on every rank (neither rank nor data decides it): every rank takes
                # the arm that communicates; what the other arm does is not proved absent
                self.ev.approx = True
                return True
            raise Abort("a condition whose value this rank cannot know", line, v)
        try:
            b = bool(v)
        except Exception:
            raise Abort("a condition whose value this rank cannot know", line) from None
        self.decided.setdefault(line, set()).add(b)
        return b

    # ------------------------------------------------------------------ statements
    def run_block(self, stmts: list[ast.stmt], env: dict) -> None:
        for s in stmts:
            self.stmt(s, env)

    def stmt(self, s: ast.stmt, env: dict) -> None:
        self.tick(s.lineno)
        if isinstance(s, ast.Expr):
            self.expr(s.value, env)
        elif isinstance(s, ast.Assign):
            v = self.expr(s.value, env)
            for t in s.targets:
                self.assign(t, v, env)
        elif isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value, env), env)
        elif isinstance(s, ast.AugAssign):
            cur = self.expr(_load(s.target), env)
            v = self.binop(s.op, cur, self.expr(s.value, env))
            self.assign(s.target, v, env)
        elif isinstance(s, ast.If):
            c = self.expr(s.test, env)
            if isinstance(c, Unknown | Tensor | Interval) and not self.cur.communicates(s):
                self.forget(s, env, c, s.test.lineno)
                return
            self.run_block(s.body if self.truth(c, s.test) else s.orelse, env)
        elif isinstance(s, ast.For | ast.AsyncFor):
            self.for_loop(s, env)
        elif isinstance(s, ast.While):
            self.while_loop(s, env)
        elif isinstance(s, ast.Break):
            raise _Break
        elif isinstance(s, ast.Continue):
            raise _Continue
        elif isinstance(s, ast.Return):
            raise _Return(self.expr(s.value, env) if s.value is not None else None)
        elif isinstance(s, ast.Raise):
            name = ""
            if s.exc is not None:
                e = s.exc.func if isinstance(s.exc, ast.Call) else s.exc
                name = e.id if isinstance(e, ast.Name) else getattr(e, "attr", "")
            raise Stop("exception", s.lineno, name)
        elif isinstance(s, ast.Assert):
            c = self.expr(s.test, env)
            if _is_known(c) and not c:
                raise Stop("exception", s.lineno, "AssertionError")
        elif isinstance(s, ast.Try):
            self.try_stmt(s, env)
        elif isinstance(s, ast.With | ast.AsyncWith):
            for item in s.items:
                ctx = item.context_expr
                f = ctx.func if isinstance(ctx, ast.Call) else ctx
                if (getattr(f, "attr", None) or getattr(f, "id", None)) in ("join", "Join"):
                    # DDP's join shadows the collectives of ranks that ran out of inputs
                    raise Abort("uneven inputs under a join context", s.lineno)
            self.with_items(s, list(s.items), env)
        elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
            env[s.name] = self.make_fn(s, env)
        elif isinstance(s, ast.ClassDef):
            env[s.name] = self.make_cls(s, env)
        elif isinstance(s, ast.Import):
            for a in s.names:
                if a.asname:
                    env[a.asname] = self.import_module(a.name, 0) or Mod(a.name)
                else:
                    top = a.name.split(".")[0]
                    self.import_module(a.name, 0)  # runs its top level, as Python does
                    env[top] = self.import_module(top, 0) or Mod(top)
        elif isinstance(s, ast.ImportFrom):
            self.import_from(s, env)
        elif isinstance(s, ast.Global | ast.Nonlocal):
            env.setdefault("__globals_names__", set()).update(s.names)
        elif isinstance(s, ast.Pass | ast.Delete):
            return
        else:
            if self.cur.communicates(s):
                raise Abort(f"`{type(s).__name__}` statement", s.lineno)
            self.forget(s, env)

    def with_items(self, s: ast.With | ast.AsyncWith, items: list, env: dict) -> None:
        """`with A() as a, B():` — a context manager of the project's classes runs its
        `__enter__` and `__exit__` (a collective in `__exit__` runs on the ranks that entered)."""
        if not items:
            self.run_block(s.body, env)
            return
        item, rest = items[0], items[1:]
        v = self.expr(item.context_expr, env)
        enter = _class_attr(v.cls, "__enter__") if isinstance(v, Obj) else None
        leave = _class_attr(v.cls, "__exit__") if isinstance(v, Obj) else None
        got = (
            self.call_fn(_bind(enter, v), [], {}, item.context_expr) if isinstance(enter, Fn) else v
        )
        if item.optional_vars is not None:
            self.assign(item.optional_vars, got if isinstance(got, Obj) else UNK, env)
        if not isinstance(leave, Fn):
            self.with_items(s, rest, env)
            return
        try:
            self.with_items(s, rest, env)
        except Stop as stop:
            if stop.kind != "exception":
                raise
            if self.call_fn(_bind(leave, v), [UNK, UNK, UNK], {}, item.context_expr) is not True:
                raise
            return
        self.call_fn(_bind(leave, v), [None, None, None], {}, item.context_expr)

    # ------------------------------------------------------------------ the project's modules
    def _unit(self) -> object | None:
        return None if self.cur is self.ev else self.cur

    def import_module(self, name: str, level: int) -> ProjMod | None:
        """The project module an import names, its top level run by this rank once; None
        when it is not a file of this run (or it could not be followed): then it stays an
        opaque `Mod`, as every library does."""
        index = self.ev.modules_index
        if index is None:
            return None
        cur_module = getattr(self.cur, "module", self.ev.facts.module)
        target = index.find(self.cur.path, cur_module, name, level)
        if target is None:
            return None
        if target in self.modules:
            return self.modules[target]
        unit = index.unit(target, lambda short: short == self.ev.short)
        if unit is None or unit.path == self.ev.path:
            self.modules[target] = None
            return None
        mod = ProjMod(target, {"__name__": target})
        self.modules[target] = mod  # a circular import sees the part already run
        outer = self.cur, self.g
        self.cur, self.g = unit, mod.globals
        try:
            self.run_block(unit.tree.body, mod.globals)
        except (Abort, Stop, _Return, _Break, _Continue):
            self.modules[target] = None  # its top level cannot be followed: opaque
            return None
        finally:
            self.cur, self.g = outer
        return mod

    def import_from(self, s: ast.ImportFrom, env: dict) -> None:
        base = s.module or ""
        mod = self.import_module(base, s.level) if (base or s.level) else None
        for a in s.names:
            if a.name == "*":
                if mod is not None:
                    env.update({k: v for k, v in mod.globals.items() if not k.startswith("_")})
                continue
            sub = self.import_module(f"{base}.{a.name}" if base else a.name, s.level)
            if sub is not None:
                v: object = sub
            elif mod is not None:
                v = mod.globals.get(a.name, UNK)
            elif s.level:
                v = UNK  # a relative import of a file this run does not have
            else:
                v = Mod(f"{base}.{a.name}" if base else a.name)
            env[a.asname or a.name] = v

    def forget(self, s: ast.AST, env: dict, cond: object = UNK, cond_line: int = 0) -> None:
        """A statement skipped because its path is unknown: what it assigns becomes unknown
        (computed from the condition, when the condition's origin is known)."""
        value = values.under(self, cond, cond_line) if cond is not UNK else UNK
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                env[n.id] = value
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                base = env.get(n.value.id) if isinstance(n.value, ast.Name) else None
                if isinstance(base, Obj):
                    base.attrs[n.attr] = value
            elif isinstance(n, ast.Return | ast.Break | ast.Continue | ast.Raise):
                if self.fn_nodes and not self.cur.communicates(self.fn_nodes[-1]):
                    raise _Return(UNK)  # whatever it returns, the function communicates nothing
                raise Abort(
                    "an exit whose condition this rank cannot know", n.lineno, cond, cond_line
                )

    def try_stmt(self, s: ast.Try, env: dict) -> None:
        try:
            try:
                self.run_block(s.body, env)
            except Stop as stop:
                handler = self.handler_for(s, stop)
                if handler is None:
                    raise
                if handler.name:
                    env[handler.name] = UNK
                self.run_block(handler.body, env)
            else:
                self.run_block(s.orelse, env)
        finally:
            if s.finalbody:
                self.run_block(s.finalbody, env)

    def handler_for(self, s: ast.Try, stop: Stop) -> ast.ExceptHandler | None:
        if stop.kind != "exception":
            return None
        for h in s.handlers:
            names = []
            if h.type is None:
                return h
            for t in h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]:
                names.append(t.id if isinstance(t, ast.Name) else getattr(t, "attr", ""))
            if {"Exception", "BaseException", stop.exc} & set(names):
                return h
        return None

    def for_loop(self, s: ast.For | ast.AsyncFor, env: dict) -> None:
        it = self.expr(s.iter, env)
        items = self.iterate(it, s)
        if items is None:
            if not self.cur.communicates(s):
                self.forget(s, env)
                return
            # an iterable of unknown length (a data loader): every rank takes the body once,
            # the taint rules judge whether the count can differ between ranks
            items = [values.element(self, it, 0)]
            self.ev.approx = True
        elif isinstance(it, set | frozenset) and any(isinstance(x, str) for x in it):
            before = len(self.actions)
            self._loop(s, env, items)
            if len(self.actions) > before:
                self.ev.note_set_loop(s)
            return
        self._loop(s, env, items)

    def _loop(self, s: ast.For | ast.AsyncFor, env: dict, items: list) -> None:
        for x in items:
            self.tick(s.lineno)
            self.assign(s.target, x, env)
            try:
                self.run_block(s.body, env)
            except _Break:
                return
            except _Continue:
                continue
        self.run_block(s.orelse, env)

    def while_loop(self, s: ast.While, env: dict) -> None:
        while True:
            c = self.expr(s.test, env)
            if isinstance(c, Unknown | Tensor | Interval):
                if not self.cur.communicates(s):
                    self.forget(s, env, c, s.lineno)
                    return
                raise Abort("a `while` loop whose bound this rank cannot know", s.lineno, c)
            if not self.truth(c, s.test):
                break
            self.tick(s.lineno)
            try:
                self.run_block(s.body, env)
            except _Break:
                return
            except _Continue:
                continue
        self.run_block(s.orelse, env)

    def iterate(self, it: object, node: ast.AST) -> list | None:
        if isinstance(it, list | tuple | range | str | dict | set | frozenset):
            if len(it) > MAX_STEPS:
                raise Abort("a loop too long to unroll", node.lineno)
            if isinstance(it, set | frozenset):
                return sorted(it, key=repr)
            return list(it)
        if isinstance(it, Tensor) and it.shape:
            rows = [Tensor(it.shape[1:], it.dtype) for _ in range(it.shape[0])]
            return [values.with_origin(self, t, ("row", k), (it,)) for k, t in enumerate(rows)]
        return None

    def assign(self, target: ast.expr, v: object, env: dict) -> None:
        if isinstance(target, ast.Name):
            names = env.get("__globals_names__")
            if names and target.id in names:
                self.g[target.id] = v
            else:
                env[target.id] = v
        elif isinstance(target, ast.Tuple | ast.List):
            elts = target.elts
            vals: list | None = None
            if isinstance(v, list | tuple | range) and not any(
                isinstance(e, ast.Starred) for e in elts
            ):
                vals = list(v) if len(v) == len(elts) else None
            for k, e in enumerate(elts):
                if isinstance(e, ast.Starred):
                    self.assign(e.value, UNK, env)
                else:
                    self.assign(e, vals[k] if vals is not None else values.element(self, v, k), env)
        elif isinstance(target, ast.Attribute):
            base = self.expr(target.value, env)
            if isinstance(base, Obj | Cls):
                base.attrs[target.attr] = v
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value, env)
            key = self.expr(target.slice, env)
            if isinstance(base, list | dict) and _is_known(key):
                with contextlib.suppress(IndexError, TypeError, KeyError):
                    base[key] = v
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNK, env)

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ast.expr | None, env: dict) -> object:
        if e is None:
            return None
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            return self.lookup(e.id, env)
        if isinstance(e, ast.BinOp):
            return self.binop(e.op, self.expr(e.left, env), self.expr(e.right, env))
        if isinstance(e, ast.UnaryOp):
            v = self.expr(e.operand, env)
            if isinstance(e.op, ast.Not):
                return (not v) if _is_known(v) else values.derived(self, "not", (v,))
            if isinstance(v, Tensor):
                return v
            if isinstance(v, int | float) and not isinstance(e.op, ast.Invert):
                return -v if isinstance(e.op, ast.USub) else v
            return ~v if isinstance(v, int) else UNK
        if isinstance(e, ast.BoolOp):
            is_and = isinstance(e.op, ast.And)
            result: object = is_and
            for part in e.values:
                v = self.expr(part, env)
                if not _is_known(v):
                    result = values.derived(self, "boolop", (v, result))
                    continue
                if is_and and not v:
                    return v
                if not is_and and v:
                    return v
                if not isinstance(result, Unknown):
                    result = v
            return result
        if isinstance(e, ast.Compare):
            left = self.expr(e.left, env)
            for op, right_node in zip(e.ops, e.comparators, strict=True):
                right = self.expr(right_node, env)
                r = self.compare(op, left, right)
                if isinstance(r, Unknown) or not r:
                    return r
                left = right
            return True
        if isinstance(e, ast.IfExp):
            c = self.expr(e.test, env)
            if isinstance(c, Unknown | Tensor | Interval):
                a, b = self.expr(e.body, env), self.expr(e.orelse, env)
                return a if _same(a, b) else values.derived(self, "ifexp", (c, a, b))
            return self.expr(e.body if self.truth(c, e.test) else e.orelse, env)
        if isinstance(e, ast.Call):
            return self.call_expr(e, env)
        if isinstance(e, ast.Attribute):
            return self.attribute(self.expr(e.value, env), e.attr, e)
        if isinstance(e, ast.Subscript):
            return self.subscript(self.expr(e.value, env), e.slice, env)
        if isinstance(e, ast.List | ast.Tuple | ast.Set):
            vals: list = []
            for x in e.elts:
                if isinstance(x, ast.Starred):
                    inner = self.expr(x.value, env)
                    if not isinstance(inner, list | tuple | range):
                        return UNK
                    vals.extend(inner)
                else:
                    vals.append(self.expr(x, env))
            if isinstance(e, ast.List):
                return vals
            if isinstance(e, ast.Tuple):
                return tuple(vals)
            try:
                return set(vals)
            except TypeError:
                return UNK
        if isinstance(e, ast.Dict):
            d = {}
            for k, v in zip(e.keys, e.values, strict=True):
                if k is None:
                    inner = self.expr(v, env)
                    if isinstance(inner, dict):
                        d.update(inner)
                    continue
                key = self.expr(k, env)
                try:
                    d[key] = self.expr(v, env)
                except TypeError:
                    return UNK
            return d
        if isinstance(e, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return self.comprehension(e, env)
        if isinstance(e, ast.Lambda):
            return Fn(e, self.g, self.defaults(e.args, env), "<lambda>", unit=self._unit())
        if isinstance(e, ast.NamedExpr):
            v = self.expr(e.value, env)
            self.assign(e.target, v, env)
            return v
        if isinstance(e, ast.JoinedStr):
            return UNK
        if isinstance(e, ast.Starred):
            return self.expr(e.value, env)
        if isinstance(e, ast.Await):
            return self.expr(e.value, env)
        return UNK

    def lookup(self, name: str, env: dict) -> object:
        if name in env:
            return env[name]
        if name in self.g:
            return self.g[name]
        return BUILTINS.get(name, UNK)

    def binop(self, op: ast.operator, a: object, b: object) -> object:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return values.with_origin(self, _tensor_binop(op, a, b), type(op).__name__, (a, b))
        if not _is_known(a, b):
            return values.derived(self, type(op).__name__, (a, b))
        fn = BIN_OPS.get(type(op))
        if fn is None:
            return UNK
        try:
            if isinstance(op, ast.Pow) and isinstance(b, int) and abs(b) > 64:
                return UNK
            if isinstance(op, ast.Mult) and isinstance(a, list | str | tuple) and b > 100_000:
                return UNK
            return fn(a, b)
        except Exception:
            return UNK

    def compare(self, op: ast.cmpop, a: object, b: object) -> object:
        if isinstance(op, ast.Is | ast.IsNot):
            if isinstance(a, Unknown) or isinstance(b, Unknown):
                return values.derived(self, type(op).__name__, (a, b))
            if b is None or a is None:
                same = (a is None) == (b is None)
                return same if isinstance(op, ast.Is) else not same
            return UNK
        if isinstance(a, Interval) and isinstance(b, int | float):
            return _interval_cmp(op, a, b)
        if isinstance(b, Interval) and isinstance(a, int | float):
            flipped = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}
            return _interval_cmp(flipped.get(type(op), op), b, a)
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return values.derived(self, type(op).__name__, (a, b))
        if isinstance(op, ast.In | ast.NotIn) and isinstance(b, list | tuple | range | set | dict):
            if not _is_known(a) or any(isinstance(x, Unknown) for x in b):
                return values.derived(self, type(op).__name__, (a, b))
        elif not _is_known(a, b):
            return values.derived(self, type(op).__name__, (a, b))
        try:
            return CMP_OPS[type(op)](a, b)
        except Exception:
            return UNK

    def subscript(self, base: object, sl: ast.expr, env: dict) -> object:
        if isinstance(sl, ast.Slice):
            lo, hi, st = (self.expr(x, env) for x in (sl.lower, sl.upper, sl.step))
            if isinstance(base, Tensor):
                sliced = _tensor_slice(base, lo, hi, st)
                return values.with_origin(self, sliced, "slice", (base, lo, hi, st))
            if isinstance(base, list | tuple | range | str) and _is_known(lo, hi, st):
                try:
                    return base[slice(lo, hi, st)]
                except Exception:
                    return UNK
            return UNK
        key = self.expr(sl, env)
        if isinstance(base, Tensor):
            return values.with_origin(
                self, Tensor(None, base.dtype, base.lo, base.hi), "index", (base, key)
            )
        if base is ENVIRON:
            return self.env_var(key)
        if isinstance(base, list | tuple | range | str | dict) and _is_known(key):
            try:
                return base[key]
            except Exception:
                return UNK
        return values.derived(self, "index", (base, key))

    def comprehension(self, e, env: dict) -> object:
        local = dict(env)
        out: list = []

        def gen(k: int) -> None:
            if k == len(e.generators):
                if isinstance(e, ast.DictComp):
                    out.append((self.expr(e.key, local), self.expr(e.value, local)))
                else:
                    out.append(self.expr(e.elt, local))
                return
            g = e.generators[k]
            items = self.iterate(self.expr(g.iter, local), e)
            if items is None:
                raise _Unknowable
            for x in items:
                self.tick(e.lineno)
                self.assign(g.target, x, local)
                ok = True
                for cond in g.ifs:
                    c = self.expr(cond, local)
                    if not _is_known(c):
                        raise _Unknowable
                    if not c:
                        ok = False
                        break
                if ok:
                    gen(k + 1)

        try:
            gen(0)
        except _Unknowable:
            return UNK
        if isinstance(e, ast.SetComp):
            try:
                return set(out)
            except TypeError:
                return UNK
        if isinstance(e, ast.DictComp):
            try:
                return dict(out)
            except TypeError:
                return UNK
        return out

    def attribute(self, base: object, attr: str, node: ast.AST) -> object:
        if isinstance(base, Schedule):
            return ScheduleMethod(base, attr)
        if isinstance(base, ProjMod):
            if attr in base.globals:
                return base.globals[attr]
            sub = self.import_module(f"{base.name}.{attr}", 0)
            return sub if sub is not None else UNK
        if isinstance(base, Mod):
            q = f"{base.qname}.{attr}"
            if q == "os.environ":
                return ENVIRON
            if q.startswith("torch.") and attr in DTYPES:
                return DType(attr)
            return Mod(q)
        if isinstance(base, Obj):
            if attr in base.attrs:
                return base.attrs[attr]
            found = _class_attr(base.cls, attr)
            if isinstance(found, Fn):
                return _bind(found, base)
            if isinstance(found, Property):
                return self.call_fn(_bind(found.fn, base), [], {}, node)
            if found is not None:
                return found
            return self.rank_attribute(attr)
        if isinstance(base, Cls):
            found = _class_attr(base, attr)
            return found if found is not None else UNK
        if isinstance(base, Tensor):
            if attr == "shape":
                return tuple(base.shape) if base.shape is not None else UNK
            if attr == "dtype":
                return DType(base.dtype) if base.dtype else UNK
            if attr == "T":
                return Tensor(tuple(reversed(base.shape)) if base.shape else None, base.dtype)
            return TensorMethod(base, attr)
        if isinstance(base, Group):
            return GroupMethod(base, attr)
        if isinstance(base, values.ArgParser):
            return values.ParserMethod(base, attr)
        if isinstance(base, Work):
            return WorkMethod(base, attr)
        if isinstance(base, P2P) or base is ENVIRON:
            return EnvMethod(attr) if base is ENVIRON else UNK
        if isinstance(base, PLAIN) and not isinstance(base, bool | int | float | type(None)):
            allowed = SAFE_METHODS.get(type(base), set())
            if attr in allowed:
                return getattr(base, attr)
            return UNK
        if base is UNK:
            return self.rank_attribute(attr)
        if isinstance(base, Derived):
            found = self.rank_attribute(attr)
            return found if found is not UNK else values.attribute_of(self, base, attr)
        return UNK

    def rank_attribute(self, attr: str) -> object:
        """An attribute of an object the interpreter does not model, whose name says it holds
        the rank (`trainer.is_world_process_zero`, `state.is_local_process_zero`)."""
        if attr in RANK_TRUE_ZERO:
            self.ev.rank_read = True
            return RankFlag(self.rank == 0)
        if attr in RANK_ATTRS:
            self.ev.rank_read = True
            return self.rank
        if attr in WORLD_ATTRS:
            return self.world
        return UNK

    def env_var(self, key: object) -> object:
        if key in RANK_ENV:
            self.ev.rank_read = True
            return str(self.rank)
        if key in WORLD_ENV:
            return str(self.world)
        if key == "MASTER_ADDR":
            return "127.0.0.1"
        return UNK

    # ------------------------------------------------------------------ calls
    def call_expr(self, e: ast.Call, env: dict) -> object:
        func = self.expr(e.func, env)
        args: list = []
        for a in e.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value, env)
                if not isinstance(v, list | tuple | range):
                    return self.opaque(e)
                args.extend(v)
            else:
                args.append(self.expr(a, env))
        kwargs: dict = {}
        for kw in e.keywords:
            if kw.arg is None:
                v = self.expr(kw.value, env)
                if not isinstance(v, dict):
                    return self.opaque(e)
                kwargs.update(v)
            else:
                kwargs[kw.arg] = self.expr(kw.value, env)
        outer, self.env = self.env, env
        if self.cur is self.ev:
            self.ev.recorded_lines.add(e.lineno)
        try:
            return values.call_origin(self, self.call(func, args, kwargs, e), func, args, kwargs, e)
        finally:
            self.env = outer

    def opaque(self, e: ast.Call) -> object:
        site = (e.lineno, e.col_offset + 1)
        if site not in self.cur.comm_sites:
            return UNK
        comm = self.cur.comm_at.get(site)
        if comm is not None and comm.kind == "collective" and comm.via:
            # a wrapped module's forward (DDP, FSDP): one collective on its group, every call
            group = self.wrapped_group(comm.group, e.lineno)
            op = comm.op if comm.op in TRACE_OPS else "all_reduce"
            action: dict = {"op": op, "label": comm.text}
            if group.name != "WORLD":
                action["group"] = group.name
            self.record(action, e.lineno)
            return UNK
        raise Abort("a call that communicates in a way this rank cannot follow", e.lineno)

    def wrapped_group(self, key: str, line: int) -> Group:
        if key == "WORLD":
            return self.group_of(None, line)
        if key.isidentifier():
            return self.group_of(self.lookup(key, self.env), line)
        raise Abort("a process group this rank cannot know", line)

    def call(self, func: object, args: list, kwargs: dict, e: ast.Call) -> object:
        if isinstance(func, Fn):
            return self.call_fn(func, args, kwargs, e)
        if isinstance(func, Cls):
            obj = Obj(func)
            init = _class_attr(func, "__init__")
            if isinstance(init, Fn):
                self.call_fn(_bind(init, obj), args, kwargs, e)
            return obj
        if isinstance(func, Obj):
            meth = _class_attr(func.cls, "__call__") or _class_attr(func.cls, "forward")
            if isinstance(meth, Fn):
                return self.call_fn(_bind(meth, func), args, kwargs, e)
            return self.opaque(e)
        if isinstance(func, Mod):
            return self.call_api(func.qname, args, kwargs, e)
        if isinstance(func, Builtin):
            try:
                return func.fn(self, args, kwargs, e)
            except (Abort, Stop, _Return):
                raise
            except Exception:
                return UNK
        if isinstance(func, TensorMethod):
            return _tensor_method(func, args, kwargs)
        if isinstance(func, ScheduleMethod):
            return self.schedule_call(func, e)
        if isinstance(func, GroupMethod):
            return self.group_method(func, args)
        if isinstance(func, values.ParserMethod):
            return values.call_parser(self, func, args, kwargs)
        if isinstance(func, WorkMethod):
            if func.attr == "wait":
                self.wait(func.work, e)
                return True
            return UNK
        if isinstance(func, EnvMethod):
            if func.attr == "get" and args:
                v = self.env_var(args[0])
                return v if v is not UNK else (args[1] if len(args) > 1 else UNK)
            return UNK
        if isinstance(func, RankFlag):
            return func.value
        if callable(func) and not isinstance(func, type):
            try:
                if all(_is_known(a) for a in args):
                    return func(*args, **kwargs)
            except Exception:
                return UNK
            return UNK
        if any(
            isinstance(a, Fn) and self.cur.communicates(a.node) for a in (*args, *kwargs.values())
        ):
            # `study.optimize(_objective)`: the callee runs it when and as often as it decides
            raise Abort(
                "a function that communicates is handed to a call it cannot follow", e.lineno
            )
        return self.opaque(e)

    def defaults(self, a: ast.arguments, env: dict) -> dict[str, object]:
        out: dict[str, object] = {}
        pos = a.posonlyargs + a.args
        for p, d in zip(pos[len(pos) - len(a.defaults) :], a.defaults, strict=True):
            out[p.arg] = self.expr(d, env)
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            if d is not None:
                out[p.arg] = self.expr(d, env)
        return out

    def make_fn(self, s: ast.FunctionDef | ast.AsyncFunctionDef, env: dict, owner: str = "") -> Fn:
        fn = Fn(s, self.g, self.defaults(s.args, env), f"{owner}{s.name}", unit=self._unit())
        for d in s.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            if name in self.ev.table.rank_zero_decorators:
                fn.only_rank = 0
        return fn

    def make_cls(self, s: ast.ClassDef, env: dict) -> Cls:
        bases = [b for b in (self.expr(x, env) for x in s.bases) if isinstance(b, Cls)]
        cls = Cls(s.name, {}, bases)
        body_env: dict = {}
        for item in s.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                fn = self.make_fn(item, env, f"{s.name}.")
                if any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    cls.attrs[item.name] = Property(fn)
                else:
                    cls.attrs[item.name] = fn
            elif isinstance(item, ast.Assign | ast.AnnAssign):
                try:
                    self.stmt(item, body_env)
                except (Abort, Stop):
                    continue
        for k, v in body_env.items():
            cls.attrs.setdefault(k, v)
        return cls

    def call_fn(self, fn: Fn, args: list, kwargs: dict, e: ast.AST) -> object:
        if fn.only_rank is not None and fn.only_rank != self.rank:
            return None
        if self.depth >= MAX_DEPTH:
            raise Abort("calls nested too deeply", getattr(e, "lineno", 0))
        node = fn.node
        a = node.args
        env: dict = {}
        params = [p.arg for p in a.posonlyargs + a.args]
        if fn.bound is not None:
            args = [fn.bound, *args]
        for k, p in enumerate(params):
            if k < len(args):
                env[p] = args[k]
            elif p in kwargs:
                env[p] = kwargs.pop(p)
            elif p in fn.defaults:
                env[p] = fn.defaults[p]
            else:
                env[p] = UNK
        if a.vararg is not None:
            env[a.vararg.arg] = tuple(args[len(params) :])
        for p in a.kwonlyargs:
            env[p.arg] = kwargs.pop(p.arg) if p.arg in kwargs else fn.defaults.get(p.arg, UNK)
        if a.kwarg is not None:
            env[a.kwarg.arg] = dict(kwargs)
        if isinstance(node, ast.Lambda):
            return self.expr(node.body, env)
        self.depth += 1
        self.stack.append((fn.qualname, self.cur.short, getattr(e, "lineno", 0)))
        self.fn_nodes.append(node)
        outer = self.cur, self.g
        self.cur = fn.unit if fn.unit is not None else self.ev
        self.g = fn.globals
        try:
            self.run_block(node.body, env)
        except _Return as r:
            return r.value
        except (_Break, _Continue):
            return None
        except Abort as ab:
            if ab.unit is None and self.cur is not self.ev:
                ab.unit = self.cur  # its lines are that file's
            raise
        finally:
            self.depth -= 1
            self.stack.pop()
            self.fn_nodes.pop()
            self.cur, self.g = outer
        return None

    def group_method(self, m: GroupMethod, args: list) -> object:
        g = m.group
        if m.attr == "rank":
            return g.members.index(self.rank) if self.rank in g.members else -1
        if m.attr == "size":
            return len(g.members)
        return UNK

    # ------------------------------------------------------------------ the torch API
    def call_api(self, qname: str, args: list, kwargs: dict, e: ast.Call) -> object:
        table = self.ev.table
        name = table.canonical(qname)
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.distributed.pipelining"):
            return self.pipelining(last, args, kwargs, e)
        if name.startswith("torch.distributed.") or name.startswith("deepspeed.comm"):
            if last == "get_rank":
                self.ev.rank_read = True
                g = _arg(args, kwargs, 0, "group")
                if isinstance(g, Group):
                    return g.members.index(self.rank) if self.rank in g.members else -1
                if g is None or (isinstance(g, Unknown) and self.ev.symbolic):
                    return self.rank
                return UNK
            if last == "get_world_size":
                g = _arg(args, kwargs, 0, "group")
                if isinstance(g, Group):
                    return len(g.members)
                if g is None or (isinstance(g, Unknown) and self.ev.symbolic):
                    return self.world
                return UNK
            if last in ("is_initialized", "is_available", "is_torchelastic_launched"):
                return True
            if last in ("init_process_group", "destroy_process_group"):
                return None
            if last == "get_backend":
                return "gloo"
            if last == "new_group":
                return self.new_group(args, kwargs, e)
            if last == "get_global_rank":
                g, r = _arg(args, kwargs, 0, "group"), _arg(args, kwargs, 1, "group_rank")
                if isinstance(g, Group) and isinstance(r, int) and 0 <= r < len(g.members):
                    return g.members[r]
                if isinstance(g, Unknown) and self.ev.symbolic and isinstance(r, int):
                    return r
                return UNK
            if last == "P2POp":
                op = args[0] if args else kwargs.get("op")
                opname = op.qname.rsplit(".", 1)[-1] if isinstance(op, Mod) else None
                if opname not in ("isend", "irecv"):
                    raise Abort("a P2POp whose operation is unknown", e.lineno)
                return P2P(
                    opname,
                    _arg(args, kwargs, 1, "tensor"),
                    _arg(args, kwargs, 2, "peer"),
                    _arg(args, kwargs, 3, "group"),
                    _arg(args, kwargs, 4, "tag") or 0,
                )
            if last == "batch_isend_irecv":
                return self.batch(_arg(args, kwargs, 0, "p2p_op_list"), e)
        if name.startswith(
            ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
        ):
            fn = _arg(args, kwargs, 0, "fn")
            extra = _arg(args, kwargs, 1, "args") or ()
            if isinstance(fn, Fn) and isinstance(extra, tuple | list):
                return self.call_fn(fn, [self.rank, *extra], {}, e)
            return self.opaque(e)
        fact = table.call(qname)
        if fact is not None and fact.kind in ("collective", "send", "recv") and not fact.functional:
            return self.communicate(fact, args, kwargs, e)
        if fact is not None:
            return self.opaque(e)
        if values.seed(self, name, args, kwargs):
            return UNK
        data = values.data_call(self, name, args, kwargs, e.lineno)
        if data is not NotImplemented:
            return data
        if name.startswith("torch.") and not name.startswith("torch.distributed"):
            return _torch_call(name, last, args, kwargs)
        if name in ("os.getenv", "os.environ.get") and args:
            v = self.env_var(args[0])
            return v if v is not UNK else (args[1] if len(args) > 1 else UNK)
        if name in ("sys.exit", "os._exit", "exit", "quit"):
            raise Stop("exit", e.lineno)
        if last in RANK_TRUE_ZERO and name not in self.ev.defined:
            self.ev.rank_read = True
            return self.rank == 0
        if last in ("get_local_rank", "get_global_rank", "get_node_local_rank"):
            self.ev.rank_read = True
            return self.rank
        if name in ("time.time", "time.perf_counter", "time.monotonic"):
            return UNK
        if name == "argparse.ArgumentParser":
            return values.ArgParser()

        if name.startswith(("math.",)):
            import math

            f = getattr(math, last, None)
            if f is not None and all(_is_known(a) for a in args):
                try:
                    return f(*args)
                except Exception:
                    return UNK
        return self.opaque(e)

    def new_group(self, args: list, kwargs: dict, e: ast.Call) -> object:
        ranks = _arg(args, kwargs, 0, "ranks")
        if ranks is None:
            members: tuple[int, ...] = tuple(range(self.world))
        elif isinstance(ranks, list | tuple | range) and all(isinstance(r, int) for r in ranks):
            members = tuple(sorted(set(ranks)))
        else:
            raise Abort("a group whose members this rank cannot know", e.lineno)
        if any(r < 0 or r >= self.world for r in members):
            raise Stop("exception", e.lineno, "ValueError")
        k = len(self.groups)
        g = Group(f"g{k}", members)
        self.groups.append(g)
        local = _arg(args, kwargs, 4, "use_local_synchronization")
        if local is not True:
            self.ev.note_creation(self, k, members, e.lineno)
        return g

    def pipelining(self, last: str, args: list, kwargs: dict, e: ast.Call) -> object:
        """A pipeline stage or schedule (see `perrank_pipelining`)."""
        if last == "PipelineStage":
            index = _arg(args, kwargs, 1, "stage_index")
            num = _arg(args, kwargs, 2, "num_stages")
            if not isinstance(index, int) or not isinstance(num, int):
                raise Abort("a pipeline stage whose index this rank cannot know", e.lineno)
            group = self.group_of(_arg(args, kwargs, 8, "group"), e.lineno)
            if not 0 <= index < num:
                raise Stop("exception", e.lineno, "ValueError")  # torch refuses it
            if num != len(group.members):
                raise Abort("a pipeline of several stages per rank", e.lineno)
            shapes = _arg(args, kwargs, 4, "input_args") not in (None, UNK)
            return Stage(index, num, group.members, group.name, shapes)
        if last in SINGLE:
            stage = _arg(args, kwargs, 0, "stage")
            n = _arg(args, kwargs, 1, "n_microbatches")
            if not isinstance(stage, Stage) or not isinstance(n, int) or n < 1:
                raise Abort("a pipeline schedule this rank cannot know", e.lineno)
            return Schedule(last, stage, n)
        if last in MULTI:
            raise Abort("a pipeline schedule of several stages per rank", e.lineno)
        return self.opaque(e)

    def schedule_call(self, m: ScheduleMethod, e: ast.Call) -> object:
        if m.attr not in ("step", "eval"):
            return UNK

        def new_handle() -> str:
            self.handle_count += 1
            return f"h{self.handle_count - 1}"

        for action in step_actions(m.schedule, new_handle):
            self.record(action, e.lineno)
        return UNK

    def site(self, line: int) -> str:
        return f"{self.cur.short}:{line}"

    def group_of(self, g: object, line: int, text: str | None = None) -> Group:
        if g is None:
            return Group("WORLD", tuple(range(self.world)))
        if isinstance(g, Group):
            return g
        if isinstance(g, Unknown) and text and self.ev.symbolic:
            # a method's own group (`self.process_group`), seen from inside: its ranks are
            # 0 … world-1 and `get_rank(group)` is this rank; one such group per method
            name = f"<{text}>"
            if self.ev.symbolic_name not in (None, name):
                raise Abort("two process groups this rank cannot tell apart", line)
            self.ev.symbolic_name = name
            return Group(name, tuple(range(self.world)))
        raise Abort("a process group this rank cannot know", line)

    def record(self, action: dict, line: int) -> None:
        if len(self.actions) >= MAX_ACTIONS:
            raise Abort("too many communication calls to evaluate", line)
        action["site"] = self.site(line)
        action["stack"] = [f"{short}:{ln} in {fn}" for fn, short, ln in reversed(self.stack)]
        self.actions.append(action)
        if self.cur is self.ev:
            self.ev.recorded_lines.add(line)

    def communicate(self, fact, args: list, kwargs: dict, e: ast.Call) -> object:
        line = e.lineno
        op = OP_NAMES.get(fact.op, fact.op)
        if op == "all_reduce_coalesced":
            op = "all_reduce"
        if op not in TRACE_OPS:
            raise Abort(f"`{fact.op}` is not modelled", line)
        group = self.group_of(_argspec(args, kwargs, fact.group), line, _arg_text(e, fact.group))
        action: dict = {"op": op}
        if group.name != "WORLD":
            action["group"] = group.name
        if self.rank not in group.members:
            # a call on a group this rank is not in: torch raises on the caller
            raise Stop("exception", line, "ValueError")
        root = _argspec(args, kwargs, fact.root)
        group_root = _argspec(args, kwargs, fact.group_root)
        peer: object = None
        if fact.root is not None or fact.group_root is not None:
            if isinstance(group_root, int):
                if not 0 <= group_root < len(group.members):
                    raise Stop("exception", line, "ValueError")
                peer = group.members[group_root]
            elif isinstance(root, int):
                peer = root
            elif fact.kind in ("send", "recv") or root is not None or group_root is not None:
                raise Abort("a peer or root this rank cannot know", line)
            else:
                peer = None  # recv from any source
                raise Abort("a receive from any source", line)
        if fact.kind in ("send", "recv"):
            if peer == self.rank or peer not in group.members:
                raise Stop("exception", line, "ValueError")
            action["peer"] = peer
            tag = kwargs.get("tag", 0)
            action["tag"] = tag if isinstance(tag, int) else 0
        elif peer is not None:
            action["root"] = peer
        asyn = _argspec(args, kwargs, fact.async_) if fact.async_ else False
        if fact.op in ("isend", "irecv"):
            asyn = True
        if isinstance(asyn, Unknown):
            raise Abort("async_op this rank cannot know", line)
        self._payload(op, fact.name.rsplit(".", 1)[-1], args, kwargs, action)
        handle = None
        if asyn:
            handle = f"h{self.handle_count}"
            self.handle_count += 1
            action["handle"] = handle
            if fact.op not in ("isend", "irecv"):
                action["async"] = True
        self.record(action, line)
        values.after_collective(self, fact.name.rsplit(".", 1)[-1], args, kwargs, line)
        if handle is not None:
            return Work([handle])
        return None

    def _payload(self, op: str, raw: str, args: list, kwargs: dict, action: dict) -> None:
        if raw.endswith("object_list") or raw.endswith("_object"):
            return
        if op == "all_to_all" and raw == "all_to_all_single":
            out_s = _arg(args, kwargs, 2, "output_split_sizes")
            in_s = _arg(args, kwargs, 3, "input_split_sizes")
            if _int_list(out_s):
                action["out_splits"] = list(out_s)
            if _int_list(in_s):
                action["in_splits"] = list(in_s)
            t = _arg(args, kwargs, 1, "input")
            out = _arg(args, kwargs, 0, "output")
            n = len(self.group_of(_arg(args, kwargs, 4, "group"), 0).members)
            for key, splits, buf in (("out_splits", out_s, out), ("in_splits", in_s, t)):
                if splits is None and isinstance(buf, Tensor) and buf.shape:
                    total = _numel(buf.shape)
                    if total % n == 0:
                        action[key] = [total // n] * n
            if isinstance(t, Tensor) and t.dtype:
                action["dtype"] = t.dtype
            return
        pos = PAYLOAD.get(op)
        if pos is None:
            return
        t = args[pos] if pos < len(args) else kwargs.get("tensor")
        if isinstance(t, Tensor):
            if t.dtype:
                action["dtype"] = t.dtype
            # reduce_scatter's first argument is this rank's chunk of the result, as the
            # trace's shape is for the rooted gather/scatter (whose roots hold lists)
            if t.shape is not None and op not in ("gather", "scatter"):
                action["shape"] = list(t.shape)
            op_arg = kwargs.get("op")
            if isinstance(op_arg, Mod):
                action["reduce_op"] = op_arg.qname.rsplit(".", 1)[-1].lower()

    def batch(self, ops: object, e: ast.Call) -> object:
        if not isinstance(ops, list | tuple) or not all(isinstance(p, P2P) for p in ops):
            raise Abort("a batch of p2p operations this rank cannot know", e.lineno)
        name = f"b{self.batch_count}"
        self.batch_count += 1
        works = []
        for p in ops:
            group = self.group_of(p.group, e.lineno)
            if not isinstance(p.peer, int):
                raise Abort("a peer this rank cannot know", e.lineno)
            handle = f"h{self.handle_count}"
            self.handle_count += 1
            action = {"op": p.op, "peer": p.peer, "handle": handle, "batch": name}
            if group.name != "WORLD":
                action["group"] = group.name
            if isinstance(p.tag, int) and p.tag:
                action["tag"] = p.tag
            if isinstance(p.tensor, Tensor) and p.tensor.dtype:
                action["dtype"] = p.tensor.dtype
                if p.tensor.shape is not None:
                    action["shape"] = list(p.tensor.shape)
            self.record(action, e.lineno)
            works.append(Work([handle]))
        return works

    def wait(self, work: Work, e: ast.Call) -> None:
        self.record({"op": "wait", "handles": list(work.handles)}, e.lineno)


class _Unknowable(Exception):
    pass


@dataclass(frozen=True)
class DType:
    name: str


@dataclass
class TensorMethod:
    tensor: Tensor
    attr: str


@dataclass
class GroupMethod:
    group: Group
    attr: str


@dataclass
class WorkMethod:
    work: Work
    attr: str


@dataclass
class EnvMethod:
    attr: str


@dataclass(frozen=True)
class RankFlag:
    """`trainer.is_world_process_zero`: usable as a value and as a call."""

    value: bool

    def __bool__(self) -> bool:
        return self.value


@dataclass
class Property:
    fn: Fn


@dataclass
class Builtin:
    fn: object


class _Environ:
    pass


ENVIRON = _Environ()


def _bind(fn: Fn, obj: object) -> Fn:
    """A method bound to its object (a copy: the class keeps the unbound one)."""
    return Fn(fn.node, fn.globals, fn.defaults, fn.qualname, obj, fn.only_rank, fn.unit)


def _class_attr(cls: Cls, attr: str) -> object | None:
    if attr in cls.attrs:
        return cls.attrs[attr]
    for b in cls.bases:
        found = _class_attr(b, attr)
        if found is not None:
            return found
    return None


def _same(a: object, b: object) -> bool:
    if a is b:
        return True
    if _is_known(a, b):
        try:
            return bool(a == b)
        except Exception:
            return False
    return False


def _arg(args: list, kwargs: dict, pos: int | None, kw: str | None) -> object:
    if pos is not None and pos < len(args):
        return args[pos]
    if kw is not None and kw in kwargs:
        return kwargs[kw]
    return None


def _argspec(args: list, kwargs: dict, spec) -> object:
    if spec is None:
        return None
    return _arg(args, kwargs, spec[0], spec[1])


def _arg_text(e: ast.Call, spec) -> str | None:
    """The source text of the argument `spec` names in a call, if it was passed."""
    if spec is None:
        return None
    pos, kw = spec
    if pos is not None and pos < len(e.args) and not isinstance(e.args[pos], ast.Starred):
        return ast.unparse(e.args[pos])
    for k in e.keywords:
        if k.arg == kw:
            return ast.unparse(k.value)
    return None


def _int_list(v: object) -> bool:
    return isinstance(v, list | tuple) and all(isinstance(x, int) for x in v)


def _load(target: ast.expr) -> ast.expr:
    """The same expression, read instead of written (for `x += 1`)."""
    if isinstance(target, ast.Name):
        return ast.Name(target.id, ast.Load())
    if isinstance(target, ast.Attribute):
        return ast.Attribute(target.value, target.attr, ast.Load())
    if isinstance(target, ast.Subscript):
        return ast.Subscript(target.value, target.slice, ast.Load())
    return target


def _interval_cmp(op: ast.cmpop, a: Interval, b: float) -> object:
    if isinstance(op, ast.Gt | ast.GtE):
        if (a.lo > b) or (isinstance(op, ast.GtE) and a.lo >= b):
            return True
        if a.hi < b or (isinstance(op, ast.Gt) and a.hi <= b):
            return False
    if isinstance(op, ast.Lt | ast.LtE):
        if (a.hi < b) or (isinstance(op, ast.LtE) and a.hi <= b):
            return True
        if a.lo > b or (isinstance(op, ast.Lt) and a.lo >= b):
            return False
    return UNK


# ---------------------------------------------------------------------------- tensors
def _shape_of(args: list, kwargs: dict) -> tuple[int, ...] | None:
    dims = args
    if len(args) == 1 and isinstance(args[0], list | tuple):
        dims = list(args[0])
    if "size" in kwargs and isinstance(kwargs["size"], list | tuple):
        dims = list(kwargs["size"])
    if dims and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return tuple(dims)
    return None


def _dtype_kw(kwargs: dict, default: str | None = "float32") -> str | None:
    d = kwargs.get("dtype")
    if isinstance(d, DType):
        return _norm_dtype(d.name)
    if d is None:
        return default
    return None


def _norm_dtype(name: str) -> str:
    return {"float": "float32", "half": "float16", "double": "float64", "long": "int64"}.get(
        name, "int32" if name == "int" else name
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _common_dtype(parts: object) -> str | None:
    if isinstance(parts, list | tuple) and parts and all(isinstance(p, Tensor) for p in parts):
        dtypes = {p.dtype for p in parts}
        return dtypes.pop() if len(dtypes) == 1 else None
    return None


def _conv2d(args: list, kwargs: dict) -> Tensor:
    x, k = [*args, None, None][:2]
    pad = kwargs.get("padding", args[4] if len(args) > 4 else 0)
    stride = kwargs.get("stride", args[3] if len(args) > 3 else 1)
    dtype = x.dtype if isinstance(x, Tensor) else None
    if (
        isinstance(x, Tensor)
        and isinstance(k, Tensor)
        and x.shape is not None
        and k.shape is not None
        and len(x.shape) == 4
        and len(k.shape) == 4
        and isinstance(pad, int)
        and stride == 1
    ):
        h = x.shape[2] + 2 * pad - k.shape[2] + 1
        w = x.shape[3] + 2 * pad - k.shape[3] + 1
        return Tensor((x.shape[0], k.shape[0], h, w), dtype)
    return Tensor(None, dtype)


def _padded(t: Tensor, pad: object) -> Tensor:
    """`F.pad(t, (left, right, top, bottom, …))`: pairs widen the last dimensions, last first."""
    if t.shape is None or not isinstance(pad, list | tuple) or len(pad) % 2:
        return Tensor(None, t.dtype)
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in pad):
        return Tensor(None, t.dtype)
    if len(pad) // 2 > len(t.shape):
        return Tensor(None, t.dtype)
    shape = list(t.shape)
    for k in range(len(pad) // 2):
        shape[-1 - k] += pad[2 * k] + pad[2 * k + 1]
    return Tensor(tuple(shape), t.dtype) if min(shape) >= 0 else Tensor(None, t.dtype)


def _torch_call(name: str, last: str, args: list, kwargs: dict) -> object:
    if last == "conv2d":
        return _conv2d(args, kwargs)
    if name == "torch.nn.functional.pad" and args and isinstance(args[0], Tensor):
        return _padded(args[0], args[1] if len(args) > 1 else kwargs.get("pad"))
    if name.startswith("torch.nn.functional.") and args and isinstance(args[0], Tensor):
        keeps = last in SHAPE_KEEPING or last in ("gelu", "silu", "dropout", "layer_norm")
        return Tensor(args[0].shape if keeps else None, args[0].dtype)
    if last in CREATORS and name.count(".") == 1:
        shape_args = args[:-1] if last == "full" else args
        t = Tensor(_shape_of(shape_args, kwargs), _dtype_kw(kwargs))
        if last == "rand":
            t.lo, t.hi = 0.0, 1.0
        return t
    if last in ("empty_like", "zeros_like", "ones_like", "randn_like", "rand_like", "full_like"):
        src = args[0] if args else None
        if isinstance(src, Tensor):
            return Tensor(src.shape, _dtype_kw(kwargs, src.dtype))
        return Tensor(None, None)
    if last == "tensor" and args:
        data = args[0]
        shape = None
        default = "float32"
        if isinstance(data, list | tuple):
            if all(isinstance(x, int | float) for x in data):
                shape = (len(data),)
                if all(isinstance(x, int) and not isinstance(x, bool) for x in data) and data:
                    default = "int64"
        elif isinstance(data, int | float):
            shape = ()
            default = "int64" if isinstance(data, int) and not isinstance(data, bool) else default
        return Tensor(shape, _dtype_kw(kwargs, default))
    if last == "arange" and args and all(isinstance(a, int) for a in args):
        return Tensor((len(range(*args)),), _dtype_kw(kwargs, "int64"))
    if last == "cat" and args and isinstance(args[0], list | tuple):
        parts = args[0]
        if parts and all(isinstance(p, Tensor) and p.shape for p in parts):
            first = parts[0]
            if all(
                len(p.shape) == len(first.shape) and p.shape[1:] == first.shape[1:] for p in parts
            ):
                return Tensor((sum(p.shape[0] for p in parts), *first.shape[1:]), first.dtype)
        return Tensor(None, _common_dtype(parts))
    if last in ("stack",) and args and isinstance(args[0], list | tuple):
        parts = args[0]
        if parts and all(isinstance(p, Tensor) and p.shape is not None for p in parts):
            return Tensor((len(parts), *parts[0].shape), parts[0].dtype)
        return Tensor(None, _common_dtype(parts))
    if last in ("Generator", "manual_seed", "no_grad", "inference_mode", "set_grad_enabled"):
        return UNK
    if last in ("randint",):
        return Tensor(_shape_of(args[2:3] if len(args) > 2 else [], kwargs), "int64")
    if last in REDUCING or last in ("tanh", "relu", "sigmoid", "exp", "abs", "sqrt"):
        src = args[0] if args else None
        if isinstance(src, Tensor):
            return Tensor(src.shape if last not in REDUCING else None, src.dtype)
    return UNK


def _tensor_binop(op: ast.operator, a: object, b: object) -> object:
    ta = a if isinstance(a, Tensor) else None
    tb = b if isinstance(b, Tensor) else None
    if isinstance(op, ast.MatMult):
        if ta and tb and ta.shape and tb.shape and len(ta.shape) == 2 and len(tb.shape) == 2:
            return Tensor((ta.shape[0], tb.shape[1]), ta.dtype)
        return Tensor(None, (ta or tb).dtype)
    if ta and tb:
        shape = ta.shape if ta.shape == tb.shape else None
        if ta.shape is not None and tb.shape == ():
            shape = ta.shape
        if tb.shape is not None and ta.shape == ():
            shape = tb.shape
        return Tensor(shape, ta.dtype if ta.dtype == tb.dtype else None)
    t = ta or tb
    if isinstance(a if tb else b, Unknown):
        return Tensor(t.shape, t.dtype)
    return Tensor(t.shape, t.dtype)


def _tensor_slice(t: Tensor, lo: object, hi: object, st: object) -> Tensor:
    if t.shape and _is_known(lo, hi, st):
        return Tensor((len(range(t.shape[0])[slice(lo, hi, st)]), *t.shape[1:]), t.dtype)
    return Tensor(None, t.dtype)


def _tensor_method(m: TensorMethod, args: list, kwargs: dict) -> object:
    t, attr = m.tensor, m.attr
    if attr in DTYPE_METHODS:
        return Tensor(t.shape, DTYPE_METHODS[attr])
    if attr == "to":
        d = next((a for a in args if isinstance(a, DType)), kwargs.get("dtype"))
        if isinstance(d, DType):
            return Tensor(t.shape, _norm_dtype(d.name))
        return Tensor(t.shape, t.dtype)
    if attr == "type":
        d = args[0] if args else None
        return Tensor(t.shape, _norm_dtype(d.name) if isinstance(d, DType) else None)
    if attr in SHAPE_KEEPING:
        return (
            Tensor(t.shape, t.dtype, t.lo, t.hi)
            if attr in ("clone", "detach", "cpu")
            else Tensor(t.shape, t.dtype)
        )
    if attr in ("item",):
        if t.lo is not None and t.hi is not None:
            return Interval(t.lo, t.hi)
        return UNK
    if attr in ("numel",):
        if t.shape is not None:
            n = 1
            for d in t.shape:
                n *= d
            return n
        return UNK
    if attr == "size" or attr == "dim":
        if t.shape is None:
            return UNK
        if attr == "dim":
            return len(t.shape)
        if args and isinstance(args[0], int):
            try:
                return t.shape[args[0]]
            except IndexError:
                return UNK
        return tuple(t.shape)
    if attr in ("new_zeros", "new_ones", "new_empty", "new_full"):
        shape_args = args[:-1] if attr == "new_full" else args
        return Tensor(_shape_of(shape_args, kwargs), _dtype_kw(kwargs, t.dtype))
    if attr in ("view_as", "reshape_as", "expand_as"):
        other = args[0] if args else None
        return Tensor(other.shape if isinstance(other, Tensor) else None, t.dtype)
    if attr in ("view", "reshape"):
        shape = _shape_of(args, kwargs)
        if shape is not None and -1 not in shape:
            return Tensor(shape, t.dtype)
        return Tensor(None, t.dtype)
    if attr in ("t",):
        return Tensor(tuple(reversed(t.shape)) if t.shape and len(t.shape) == 2 else None, t.dtype)
    if attr in ("flatten",):
        if t.shape is not None:
            n = 1
            for d in t.shape:
                n *= d
            return Tensor((n,), t.dtype)
        return Tensor(None, t.dtype)
    if attr in ("tolist", "any", "all", "isnan"):
        return UNK
    if attr in REDUCING:
        whole = not args and "dim" not in kwargs
        return Tensor(() if whole else None, t.dtype)
    return Tensor(None, t.dtype)


# ---------------------------------------------------------------------------- builtins
def _b_range(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    if args and all(isinstance(a, int) for a in args):
        return range(*args)
    return UNK


def _b_len(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    n = values.length(ev, args[0]) if args else None
    return n if n is not None else UNK


def _conv(kind):
    def f(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
        if not args:
            return kind()
        v = args[0]
        if isinstance(v, Interval):
            return v if kind is float else UNK
        if isinstance(v, Tensor):
            if v.lo is not None and v.hi is not None and kind is float:
                return Interval(v.lo, v.hi)
            return UNK
        if isinstance(v, RankFlag):
            return kind(v.value)
        if all(_is_known(a) for a in args):
            return kind(*args)
        return UNK

    return f


def _b_plain(fn):
    def f(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
        if all(_is_known(a) for a in args) and all(_is_known(v) for v in kwargs.values()):
            r = fn(*args, **kwargs)
            return list(r) if isinstance(r, map | filter | zip | enumerate | reversed) else r
        return UNK

    return f


def _b_print(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    return None


def _b_isinstance(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    return UNK


def _b_super(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    return UNK


BUILTINS: dict[str, object] = {
    "range": Builtin(_b_range),
    "len": Builtin(_b_len),
    "int": Builtin(_conv(int)),
    "float": Builtin(_conv(float)),
    "bool": Builtin(_conv(bool)),
    "str": Builtin(_conv(str)),
    "list": Builtin(_b_plain(list)),
    "tuple": Builtin(_b_plain(tuple)),
    "set": Builtin(_b_plain(set)),
    "frozenset": Builtin(_b_plain(frozenset)),
    "dict": Builtin(_b_plain(dict)),
    "sorted": Builtin(_b_plain(sorted)),
    "reversed": Builtin(_b_plain(reversed)),
    "enumerate": Builtin(_b_plain(enumerate)),
    "zip": Builtin(_b_plain(zip)),
    "min": Builtin(_b_plain(min)),
    "max": Builtin(_b_plain(max)),
    "sum": Builtin(_b_plain(sum)),
    "abs": Builtin(_b_plain(abs)),
    "divmod": Builtin(_b_plain(divmod)),
    "round": Builtin(_b_plain(round)),
    "any": Builtin(_b_plain(any)),
    "all": Builtin(_b_plain(all)),
    "print": Builtin(_b_print),
    "isinstance": Builtin(_b_isinstance),
    "super": Builtin(_b_super),
    "True": True,
    "False": False,
    "None": None,
}


# ---------------------------------------------------------------------------- one file
@dataclass
class WorldRun:
    """One entry point evaluated at one world size."""

    entry: str
    world: int
    complete: bool
    reason: str = ""
    line: int = 0
    trace: object | None = None  # commlint.trace.Trace
    decided: dict[int, set[bool]] = field(default_factory=dict)
    creation_mismatch: tuple[int, dict[int, tuple[int, ...]]] | None = None
    # (line, ranks that call it, ranks that never do) of a new_group only some ranks call
    creation_missing: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    executed: set[int] = field(default_factory=set)
    issues: int = 0  # checker findings on its trace (set by the judge)
    exact: bool = True  # no loop of unknown length was approximated
    refute_only: bool = False  # called only from other files: it may refute, never report
    steering: values.Steering | None = None  # ranks stopped at a rank-local decision


class FileEval:
    """Evaluates one file's entry points for every rank of every world size."""

    def __init__(
        self,
        facts: FileFacts,
        source: str,
        table: ApiTable,
        sizes: tuple[int, ...],
        communicating=None,
        called_elsewhere=None,
        modules_index=None,
    ):
        self.modules_index = modules_index  # the run's other files, to follow imports into
        # whether the rest of the project calls a function of this name
        self.called_elsewhere = called_elsewhere or (lambda name: False)
        self.facts = facts
        self.path = facts.path
        self.short = PurePath(facts.path).name
        self.source = source
        self.table = table
        self.tree = ast.parse(source)
        self.work = 0
        self.comm_sites = _comm_sites(facts, communicating)
        self.comm_lines = {line for line, _col in self.comm_sites}
        self.uniform_lines = uniform_conditions(facts)
        self.comm_at = {
            (n.pos.line, n.pos.col): n
            for fn in facts.functions.values()
            for n in iter_nodes(fn.body)
            if isinstance(n, Comm)
        }
        self.declared = _declared_sizes(source)
        self.nodes = list(ast.walk(self.tree))  # one walk, shared by what follows
        fixed = _literal_peers(self.nodes)
        if not self.declared and fixed:
            # code written for a fixed topology (`dist.send(x, dst=1)`): the smallest world in
            # which its literal peers exist is the one it is written for
            sizes = (max(2, max(fixed) + 1),)
        self.sizes = tuple(sorted(set(self.declared or sizes)))
        self.defined = {
            n.name for n in self.nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self._comm_cache: dict[int, bool] = {}
        self.function_spans = [
            (n.lineno, n.end_lineno or n.lineno)
            for n in self.nodes
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        self.set_loops: dict[int, ast.AST] = {}
        self.globals: dict = {}
        self.recorded_lines: set[int] = set()
        self.rank_read = False  # the entry asked for the rank (else callers decide who calls it)
        self.symbolic = False  # a method entry: its own unknown group stands for the world
        self.symbolic_name: str | None = None
        self.approx = False  # a loop of unknown length was taken once: proves no absence
        self.fps = values.Fingerprints()  # the origins of the values every rank computed
        self._creations: dict[int, list[tuple[int, int, tuple[int, ...]]]] = {}

    # what the extractor saw communicate, to refuse what the interpreter cannot follow
    def communicates(self, node: ast.AST) -> bool:
        key = id(node)
        if key not in self._comm_cache:
            lo = getattr(node, "lineno", 0)
            hi = getattr(node, "end_lineno", lo) or lo
            self._comm_cache[key] = any(lo <= ln <= hi for ln in self.comm_lines)
        return self._comm_cache[key]

    def note_set_loop(self, node: ast.AST) -> None:
        self.set_loops[node.lineno] = node

    def note_creation(self, rank: Rank, k: int, members: tuple[int, ...], line: int) -> None:
        self._creations.setdefault(k, []).append((rank.rank, line, members))

    def entries(self) -> list[tuple[str, list[ast.stmt] | ast.FunctionDef, bool]]:
        """(name, entry, refute only) of each entry point of the file."""
        main = [
            s
            for s in self.tree.body
            if isinstance(s, ast.If)
            and isinstance(s.test, ast.Compare)
            and isinstance(s.test.left, ast.Name)
            and s.test.left.id == "__name__"
        ]
        if main:
            return [("__main__", main, False)]
        # a script without a `__main__` guard: its top-level statements are the program
        script = [
            s
            for s in self.tree.body
            if not isinstance(
                s,
                ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom,
            )
        ]
        top: list = (
            [("<module>", script, False)] if any(self.communicates(s) for s in script) else []
        )
        called: set[str] = set()
        for n in self.nodes:
            if isinstance(n, ast.Call):
                f = n.func
                called.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
        out: list = []
        # called only from other files: their callers' evaluation stops at the call (it does
        # not cross files), so they are evaluated here too — to refute taint findings inside
        # them (`ZeroRedundancyOptimizer.consolidate_state_dict`, which Lightning calls), never
        # to report: their callers pair what they leave unpaired (`send_forward`)
        elsewhere = {k for k in self.defined if self.called_elsewhere(k)} - called
        called |= elsewhere
        refute: list = []
        for s in self.tree.body:
            if isinstance(s, ast.FunctionDef) and self._fn_communicates(s):
                if s.name not in called:
                    out.append((s.name, s, False))
                elif s.name in elsewhere:
                    refute.append((s.name, s, True))
            elif isinstance(s, ast.ClassDef):
                # a method nobody in the project calls by name: every rank of its groups runs it
                for m in s.body:
                    if (
                        isinstance(m, ast.FunctionDef)
                        and (m.name not in called or m.name in elsewhere)
                        and not m.name.startswith("__")
                        and m.args.args
                        and m.args.args[0].arg == "self"
                        and self._fn_communicates(m, f"{s.name}.")
                    ):
                        only = m.name in called
                        (refute if only else out).append((f"{s.name}.{m.name}", m, only))
        return top + out + refute

    def _fn_communicates(self, s: ast.FunctionDef, owner: str = "") -> bool:
        fn = self.facts.functions.get(f"{self.facts.module}.{owner}{s.name}")
        if fn is None:
            return self.communicates(s)
        return any(
            isinstance(n, Comm | CallSite) for n in iter_nodes(fn.body)
        ) and self.communicates(s)

    def run(self) -> list[WorldRun]:
        out: list[WorldRun] = []
        for name, entry, refute_only in self.entries()[:MAX_ENTRIES]:
            # a method's own group is seen from inside: one world size tells what the others do
            sizes = self.sizes[:1] if "." in name else self.sizes
            for w in sizes:
                run = self.run_world(name, entry, w)
                run.refute_only = refute_only
                out.append(run)
                if self.work > MAX_WORK:
                    return out
                if not run.complete and run.reason != "every rank stops":
                    break  # what stops one world size (data, an opaque call) stops the others
        return out

    def run_world(self, name: str, entry, world: int) -> WorldRun:
        from commlint.trace import Action, RankEnd, Trace

        ranks: dict[int, Rank] = {}
        self._creations = {}
        self.rank_read = False
        self.symbolic_name = None
        self.approx = False
        decided: dict[int, set[bool]] = {}
        executed: set[int] = set()
        stops: dict[int, tuple[Abort, int]] = {}  # ranks stopped at a value of known origin
        for r in range(world):
            self.globals = {"__name__": "__main__"}
            self.recorded_lines = set()
            rk = Rank(self, r, world)
            ranks[r] = rk
            try:
                try:
                    if isinstance(entry, list):
                        body = [s for s in self.tree.body if s not in entry]
                        rk.run_block(body, self.globals)
                        for s in entry:
                            rk.stmt(s, self.globals)
                    else:
                        rk.run_block(
                            [s for s in self.tree.body if not _is_main_block(s)], self.globals
                        )
                        owner, _, _ = name.rpartition(".")
                        params = {}
                        if owner:
                            cls = self.globals.get(owner)
                            fn = _class_attr(cls, entry.name) if isinstance(cls, Cls) else None
                            if isinstance(fn, Fn):
                                fn = _bind(fn, Obj(cls))
                            self.symbolic = True
                        else:
                            fn = self.globals.get(entry.name)
                            self.symbolic = False
                        if not isinstance(fn, Fn):
                            return WorldRun(name, world, False, "entry not found")
                        for p in entry.args.args[1 if owner else 0 :]:
                            value = _param_value(p.arg, r, world)
                            if value is not UNK:
                                params[p.arg] = value  # the others keep their defaults
                        rk.call_fn(fn, [], params, entry)
                except (_Return, _Break, _Continue):
                    pass
            except Stop as stop:
                rk.end = (stop.kind, stop.line, stop.exc)
            except Abort as ab:
                fp = values.fp_of(rk, ab.steer) if ab.steer is not None else None
                if fp is None:
                    return WorldRun(name, world, False, ab.reason, ab.line)
                stops[r] = (ab, fp)  # the other ranks tell whether their values differ
                continue
            except RecursionError:
                return WorldRun(name, world, False, "too deeply nested")
            for line, vals in rk.decided.items():
                decided.setdefault(line, set()).update(vals)
            executed |= self.recorded_lines
        if stops:
            ab = next(iter(stops.values()))[0]
            run = WorldRun(name, world, False, ab.reason, ab.line)
            run.steering = values.steering(self, world, stops)
            if len(stops) == world and len({fp for _ab, fp in stops.values()}) == 1:
                run.reason = f"{ab.reason} (a uniform value: the same on every rank)"
            return run
        if not isinstance(entry, list) and not self.rank_read:
            # a helper that never asks for the rank: its callers decide which ranks run it
            return WorldRun(name, world, False, "does not depend on the rank")
        mismatch = missing = None
        for _k, seen in sorted(self._creations.items()):
            views = {r: m for r, _line, m in seen}
            if mismatch is None and len(set(views.values())) > 1:
                # without use_local_synchronization every rank must pass the same list
                mismatch = (seen[0][1], views)
            if missing is None and set(views) != set(ranks):
                # new_group waits for every rank of the default group: the ranks that never
                # call it this often leave the others waiting there
                missing = (seen[0][1], tuple(sorted(views)), tuple(sorted(set(ranks) - set(views))))
        all_ends = [rk.end for rk in ranks.values()]
        if all(end is not None for end in all_ends) and len({(e[1]) for e in all_ends}) == 1:
            # every rank stops at the same place: this world size is not one the program runs
            return WorldRun(name, world, False, "every rank stops", all_ends[0][1])
        groups: dict[str, list[int]] = {}
        for rk in ranks.values():
            for g in rk.groups:
                prev = groups.get(g.name)
                if prev is not None and tuple(prev) != g.members:
                    groups[g.name] = sorted(set(prev) | set(g.members))
                else:
                    groups[g.name] = list(g.members)
        if self.symbolic_name is not None:
            groups[self.symbolic_name] = list(range(world))
        trace = Trace(
            world_size=world,
            groups=groups,
            ranks={r: [Action(**a) for a in rk.actions] for r, rk in ranks.items()},
            ends={
                r: RankEnd(
                    kind=rk.end[0], message=rk.end[2] or None, site=f"{self.short}:{rk.end[1]}"
                )
                for r, rk in ranks.items()
                if rk.end is not None
            },
            source="static",
            meta={"program": self.path, "entry": name},
        )
        return WorldRun(
            name,
            world,
            True,
            trace=trace,
            decided=decided,
            creation_mismatch=mismatch,
            creation_missing=missing,
            executed=executed,
            exact=not self.approx,
        )


def _is_main_block(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.If)
        and isinstance(s.test, ast.Compare)
        and isinstance(s.test.left, ast.Name)
        and s.test.left.id == "__name__"
    )


def _param_value(name: str, rank: int, world: int) -> object:
    low = name.lower()
    if low in ("rank", "global_rank", "local_rank", "my_rank", "rank_id"):
        return rank
    if low in ("world_size", "world", "ws", "nranks", "num_ranks", "n_ranks", "nprocs"):
        return world
    return UNK


def _comm_sites(facts: FileFacts, communicating=None) -> set[tuple[int, int]]:
    """(line, column) of every call the extractor saw communicate, or call project code
    that communicates (`communicating(site)`)."""
    sites: set[tuple[int, int]] = set()
    for fn in facts.functions.values():
        for n in iter_nodes(fn.body):
            if isinstance(n, Comm) or (
                isinstance(n, CallSite) and communicating is not None and communicating(n)
            ):
                sites.add((n.pos.line, n.pos.col))
    return sites


P2P_CALLS = frozenset({"send", "recv", "isend", "irecv", "P2POp"})
ROOTED = frozenset(
    {"broadcast", "reduce", "gather", "scatter", "broadcast_object_list", "gather_object"}
    | {"scatter_object_list"}
)
PEER_KEYWORDS = frozenset({"dst", "src", "peer", "dst_rank", "src_rank", "peer_rank"})


def _literal_peers(nodes: list[ast.AST]) -> set[int]:
    """Literal peer ranks of point-to-point calls (`dist.send(x, 1)`, `src=0`), and of the
    project's helpers that take a peer (`send_state_dict(sd, dst=1)`, `run_stage(peer=0)`)
    when they name two ranks or more (a fixed topology, not a root)."""
    out: set[int] = set()
    helpers: set[int] = set()
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if name in ROOTED:
            continue
        p2p = name in P2P_CALLS
        pos = 2 if name == "P2POp" else 1
        cands = [n.args[pos]] if p2p and len(n.args) > pos else []
        cands += [k.value for k in n.keywords if k.arg in PEER_KEYWORDS]
        for c in cands:
            if isinstance(c, ast.Constant) and isinstance(c.value, int) and c.value < MAX_WORLD:
                (out if p2p else helpers).add(c.value)
    if len(helpers) > 1:
        out |= helpers
    return out


def _declared_sizes(source: str) -> tuple[int, ...]:
    sizes: set[int] = set()
    for rx in (NPROC, NPROCS):
        for m in rx.finditer(source):
            sizes.add(int(m.group(1)))
    for m in MESH.finditer(source):
        n = 1
        for g in m.groups():
            if g:
                n *= int(g)
        sizes.add(n)
    return tuple(s for s in sorted(sizes) if 1 < s <= MAX_WORLD)


def evaluate_file(
    facts: FileFacts,
    table: ApiTable,
    sizes: tuple[int, ...] = DEFAULT_WORLD_SIZES,
    communicating=None,
    called_elsewhere=None,
    modules_index=None,
) -> tuple[FileEval, list[WorldRun]] | None:
    """Every entry point of one file at every world size; None when the file cannot be read
    or has nothing to evaluate."""
    if not any(isinstance(n, Comm) for fn in facts.functions.values() for n in iter_nodes(fn.body)):
        return None
    try:
        with open(facts.path, encoding="utf-8") as fh:
            source = fh.read()
        fe = FileEval(facts, source, table, sizes, communicating, called_elsewhere, modules_index)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    return fe, fe.run()


def iter_sites(finding) -> Iterator[tuple[str, int]]:
    """The `file:line` sites a checker finding names, in order."""
    for loc in finding.actions:
        if loc.site and ":" in loc.site:
            name, _, line = loc.site.rpartition(":")
            if line.isdigit():
                yield name, int(line)
