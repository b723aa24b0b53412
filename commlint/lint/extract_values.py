"""What the extractor (`extract.Extractor`) knows about a value: `Val`, how values combine
(`join`), the facts about tensors and builtins it consults, and a method's environment
(`_ClassEnv`). Plain data and small functions over `ast` literals; no walking.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, fields
from typing import TypeVar

from commlint.lint.extract_agreement import Agreement, combine
from commlint.lint.source_map import call_args

T = TypeVar("T")

GLOBAL = "global"
EXACT_RANK_NAMES = frozenset({"rank", "global_rank", "world_rank", "my_rank", "rank_id"})
ZERO_NAMES = re.compile(
    r"(^|_)(is_main_process|is_main|is_master|is_global_zero|is_rank_zero|is_rank_0|main_process)$"
)
PURE_BUILTINS = frozenset(
    [
        "int",
        "str",
        "float",
        "bool",
        "abs",
        "min",
        "max",
        "len",
        "sum",
        "round",
        "divmod",
        "range",
        "list",
        "tuple",
        "sorted",
        "set",
        "frozenset",
        "reversed",
        "enumerate",
        "zip",
        "hash",
        "format",
        "repr",
    ]
)
ENV_GETTERS = frozenset({"os.environ.get", "os.getenv", "os.environ.__getitem__"})


@dataclass(frozen=True)
class Val:
    """What the linter knows about a value."""

    dims: frozenset[str] = frozenset()  # rank dimensions it depends on
    data: bool = False
    exact: bool = False  # equals this rank's global rank
    zero: bool = False  # true exactly on global rank 0
    origin: str = ""
    uniform: bool = False  # produced by a collective: equal on every member
    group: str | None = None  # a process group (its key)
    members: frozenset[int] | None = None
    size: int | None = None
    ints: tuple[int, ...] | None = None  # literal int or list of ints
    mesh: tuple[tuple[str, ...], tuple[int, ...]] | None = None
    submesh: str | None = None
    typ: str | None = None
    deps: tuple[str, ...] = ()
    guard: str | None = None
    group_rank_of: str | None = None
    tensor: bool = False  # a tensor whose values may differ between ranks (read = data source)
    rank_mod: int | None = None  # equals the global rank modulo this
    mod_test: tuple[int, int, bool] | None = None  # true iff (rank % k == a) == holds
    stride: tuple[int, int | None] | None = None  # ranks all ≡ a (mod k); a None: one unknown a
    loop_group: bool = False  # a group made by `new_group` in a loop: its name holds several
    payload: tuple[str, str] | None = None  # (variable it was made from, "dtype X" / "size")
    # the same on every rank if the project functions it came from answer so (extract_agreement)
    agreed: Agreement | None = None
    # where a module it may be came from, when this function did not wrap it (`ModuleCall`)
    module_ref: tuple[tuple, ...] = ()

    def tainted(self) -> bool:
        return bool(self.dims) or self.data

    @property
    def collective_result(self) -> bool:
        """Made the same on every member by a collective (a constant tensor is the same
        everywhere too, but agrees with nothing it is mixed with)."""
        return self.uniform and self.origin != CONSTANT_TENSOR

    @property
    def agreeing(self) -> bool:
        """A collective's result, or may be one (`agreed`: every project call's result)."""
        return self.collective_result or self.agreed is not None

    @property
    def rank_tensor(self) -> bool:
        """A tensor of this rank's own values (not one a collective made equal everywhere)."""
        return self.tensor and not self.uniform


CLEAN = Val()


_FIELDS: dict[type, frozenset[str]] = {}


def evolve(obj: T, **changes: object) -> T:
    """`dataclasses.replace(obj, **changes)` for the extractor's plain dataclasses (no
    `__post_init__`, no `InitVar`, not slotted): the fields copied, not passed through
    `__init__` again. `replace` was a tenth of the extraction of a 2 MB file (54,000 calls
    on a 25-field `Val`)."""
    cls = obj.__class__
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    if not changes.keys() <= names:
        raise TypeError(f"{cls.__name__} has no field {sorted(changes.keys() - names)[0]!r}")
    new = object.__new__(cls)
    state = new.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return new


def join(*vals: Val) -> Val:
    """The taint of a value computed from several (`a + b`, `f(a, b)`)."""
    dims: frozenset[str] = frozenset()
    data = False
    origin = ""
    deps: tuple[str, ...] = ()
    for v in vals:
        if v.uniform:
            continue
        dims |= v.dims
        data = data or v.data
        if not origin and (v.dims or v.data):
            origin = v.origin
        deps += v.deps
    agreed = combine(vals)
    if agreed is not None and agreed.settled and not data:
        return Val(uniform=True)
    return Val(dims=dims, data=data, origin=origin, deps=deps, agreed=agreed)


# Tensor methods whose result is not a tensor of the receiver's values (sizes, metadata) or
# that read it (handled as data sources).
NON_TENSOR_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "element_size",
        "nelement",
        "data_ptr",
        "stride",
        "storage_offset",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "get_device",
        "type",
        "item",
        "tolist",
        "any",
        "all",
        "wait",
        "register_hook",
        "backward",
        "numpy",
        "__len__",
    }
)
TENSOR_ATTRIBUTES = frozenset({"data", "T", "mT", "grad", "real", "imag"})
# Tensor methods that change the dtype, and to what.
DTYPE_METHODS = {
    "double": "torch.float64",
    "float": "torch.float32",
    "half": "torch.float16",
    "bfloat16": "torch.bfloat16",
    "long": "torch.int64",
    "int": "torch.int32",
}
# Views and copies that keep a tensor's dtype and number of elements.
SAME_PAYLOAD_METHODS = frozenset(
    {"flatten", "view", "reshape", "contiguous", "detach", "clone", "view_as", "reshape_as"}
)
DTYPE_NAMES = frozenset(
    {
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "double",
        "float",
        "half",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "long",
        "int",
        "bool",
        "complex64",
        "complex128",
    }
)
WORLD_SIZE_TEXT = re.compile(r"(^|\.)(get_)?world_size(\(\))?$", re.IGNORECASE)
CONCAT_CALLS = frozenset({"torch.cat", "torch.concat", "torch.concatenate"})
PAD_CALLS = frozenset({"torch.nn.functional.pad"})


def _is_dtype(text: str) -> bool:
    """`torch.float64`, `torch.bfloat16`: a dtype spelled out."""
    head, _, name = text.rpartition(".")
    return head == "torch" and name in DTYPE_NAMES


def as_data(v: Val, origin: str) -> Val:
    """`v` as this rank's data (its own origin kept when it has one)."""
    return Val(data=True, dims=v.dims, exact=v.exact, origin=v.origin or origin)


# Tensor constructors whose values are their literal arguments (or zeros, ones, a fill value)
CONSTANT_TENSOR_CALLS = frozenset(
    {"torch.tensor", "torch.as_tensor", "torch.zeros", "torch.ones", "torch.full"}
)
CONSTANT_TENSOR = "a tensor of literal values"
_VALUE_FREE_KWARGS = frozenset({"device", "dtype", "requires_grad", "pin_memory", "layout"})


_LITERAL_TYPES = (int, float, str, bytes, bool, type(None))


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, _LITERAL_TYPES) and not isinstance(node.value, complex)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _literal(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(not isinstance(e, ast.Starred) and _literal(e) for e in node.elts)
    return False


def _literal_call(node: ast.Call) -> bool:
    """Every value-giving argument is a literal (`torch.tensor([0], device=d)`)."""
    for a in call_args(node):
        if a.keyword is not None and a.keyword in _VALUE_FREE_KWARGS:
            continue
        if a.star or not _literal(a.value):
            return False
    return True


def read_tensor(v: Val, text: str) -> Val:
    """The Python value of a rank's tensor (`float(t)`, `if t > 0.5:`): a data source."""
    if not v.rank_tensor:
        return v
    return as_data(v, f"`{text[:40]}` reads this rank's tensor values")


def _mod_test_of(v: Val) -> tuple[int, int, bool] | None:
    """`v`'s residue test; a bare `rank % k` is true iff it is not 0 (`if rank % 2:`)."""
    if v.mod_test is None and v.rank_mod is not None:
        return (v.rank_mod, 0, False)
    return v.mod_test


def _int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int(node.operand)
        return -v if v is not None else None
    return None


class _ClassEnv(dict):
    """A method's environment: locals, falling back on `self.*` attributes of the class."""

    def __init__(self, base: dict[str, Val], cls: dict[str, Val]) -> None:
        super().__init__(base)
        self.cls = cls
        self.outer: dict[str, Val] | None = None  # the function the class was made in

    def get(self, key, default=None):
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.cls.get(key, default)

    def __missing__(self, key):
        return self.cls[key]

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self.cls
