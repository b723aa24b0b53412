"""The values of the per-rank evaluator (`perrank.py`): what a name can hold while one rank's
code is interpreted (unknowns, tensors, groups, works, modules, functions, classes, objects,
the bound methods of each), the control-flow signals (`Abort`, `Stop`, return/break/continue),
the tables that say what the torch API and the stdlib do, the evaluation budgets, and small
helpers on values and call arguments. It imports nothing of the evaluator.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

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


# what stops a world size only because the program is written for another one (a mesh whose
# shape multiplies to 4 at 2 ranks): the next world size is still evaluated
OTHER_WORLD = "a device mesh for another world size than"


class Abort(Exception):
    """This rank's path cannot be decided: the world size is not evaluated."""

    def __init__(self, reason: str, line: int = 0, steer: object = None, cond: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.steer = steer  # the unknown value that decides, when its origin is known
        self.cond = cond or line  # the line of the condition that tests it
        self.unit: object | None = None  # the followed file it stopped in (None: the evaluated)
        self.sharded = False  # the exit skips calls of sharded modules the source does not show


class SharedWrite(BaseException):
    """A write into an object of a followed module's shared top level (`perrank_templates`),
    which every rank reads and none may change: the file is evaluated again without sharing.
    (Not an `Exception`: the interpreter's `except Exception` around library calls must not
    swallow it.)"""


class SharedIds:
    """The ids of the objects the followed modules' shared top levels hold (kept alive by
    `perrank_templates.Templates`), set for the evaluation under way."""

    ids: set[int] | frozenset[int] = frozenset()


SHARED = SharedIds()


def guard(obj: object) -> None:
    """`obj` is about to be written: it must not be a shared object."""
    if id(obj) in SHARED.ids:
        raise SharedWrite


class Stop(Exception):
    """The rank stops: an exception nobody catches, or `sys.exit`."""

    def __init__(self, kind: str, line: int, exc: str = "", message: object = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.line = line
        self.exc = exc
        self.message = message  # the exception's message when this rank knows it (a str)


@dataclass(frozen=True)
class Raised:
    """The exception an `except ... as e:` caught: its class name and, when known, its
    message (`"out of memory" in str(e)` decides whether a rank skips its batch)."""

    exc: str
    message: object = None


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
    # the elements of a 1-D (or 0-d) tensor made from literal numbers, while nothing may have
    # written into it (`forget_values`); `view_of`: the tensor a slice of it shares memory with
    values: tuple | None = None
    view_of: Tensor | None = None

    def forget_values(self) -> None:
        """Something may have written into the tensor (an in-place op, a library call it was
        handed to, a collective): its elements, and those of what it is a view of, are
        unknown from now on."""
        t: Tensor | None = self
        while t is not None:
            guard(t)
            t.values = None
            t = t.view_of


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
    # a function defined inside another (a closure, a lambda, a method of a local class): the
    # enclosing call's variables, read when it is called (Python's late binding)
    closure: dict | None = None


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
    # a @dataclass: its fields in order, (name, "value" | "factory" | "none", value), whose
    # generated __init__ the evaluator runs (`Config(steps=args.steps)`)
    fields: list | None = None


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
    fp: int | None = None  # its origin (the tensor it was read from), when known


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
# `d.items()`, `d.keys()`, `d.values()`: iterated, listed and tested like the dict itself
DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
PLAIN = (int, float, str, bool, type(None), tuple, list, dict, range, set, frozenset, bytes)
PLAIN += DICT_VIEWS
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
MUTATING = frozenset(
    {"append", "extend", "pop", "insert", "reverse", "setdefault", "update", "add"}
)
NPROC = re.compile(r"nproc[-_]per[-_]node[\s=]+(\d+)")
NPROCS = re.compile(r"nprocs\s*=\s*(\d+)")
MESH = re.compile(r"init_device_mesh\([^()]*?\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?,?\)")


def _is_known(*vals: object) -> bool:
    return all(v is not UNK and isinstance(v, PLAIN) for v in vals)


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
class ExitStack:
    """`contextlib.ExitStack()`: what its `callback`/`push`/`enter_context` registered, run
    last-in first-out when its `with` block (or `close()`) ends — a collective registered
    there runs on the ranks that registered it, at that point."""

    callbacks: list = field(default_factory=list)  # (function, args, kwargs, registering call)


@dataclass
class ExitStackMethod:
    stack: ExitStack
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
    cached: bool = False  # functools.cached_property: computed once per object, then kept


@dataclass
class Builtin:
    fn: object


class _Environ:
    pass


ENVIRON = _Environ()


def _bind(fn: Fn, obj: object) -> Fn:
    """A method bound to its object (a copy: the class keeps the unbound one)."""
    return Fn(fn.node, fn.globals, fn.defaults, fn.qualname, obj, fn.only_rank, fn.unit, fn.closure)


TORCH_MODULE = "__commlint_torch_module__"  # a class attribute: it derives from torch.nn.Module


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
