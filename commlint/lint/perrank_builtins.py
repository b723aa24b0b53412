"""The per-rank evaluator's model of tensor operations and Python builtins: shapes and dtypes
of what torch calls and tensor methods return (`_torch_call`, `_tensor_*`), and the
builtins (`BUILTINS`: `range`, `len`, conversions, …) an interpreted program may call.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from commlint.lint import perrank_values as values
from commlint.lint.perrank_model import (
    CREATORS,
    DTYPE_METHODS,
    REDUCING,
    SHAPE_KEEPING,
    UNK,
    Builtin,
    DType,
    Fn,
    Interval,
    Raised,
    RankFlag,
    Stop,
    Tensor,
    TensorMethod,
    Unknown,
    _is_known,
)

if TYPE_CHECKING:
    from commlint.lint.perrank import Rank


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
    if last in ("split", "chunk") and args and isinstance(args[0], Tensor):
        return _split(args[0], last, args[1:], kwargs)
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
        literal: tuple | None = None
        default: str | None = "float32"
        if isinstance(data, list | tuple):
            if all(isinstance(x, int | float) for x in data):
                shape = (len(data),)
                literal = tuple(data)
                if all(isinstance(x, int) and not isinstance(x, bool) for x in data) and data:
                    default = "int64"
            elif any(not isinstance(x, list | tuple | Tensor) for x in data):
                default = None  # an unknown number (`int(flag)` is int64, a loss float32)
        elif isinstance(data, int | float):
            shape = ()
            literal = (data,)
            default = "int64" if isinstance(data, int) and not isinstance(data, bool) else default
        elif not isinstance(data, Tensor):
            default = None  # torch infers the dtype from a value not known here
        return Tensor(shape, _dtype_kw(kwargs, default), values=literal)
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
        part = slice(lo, hi, st)
        got = Tensor((len(range(t.shape[0])[part]), *t.shape[1:]), t.dtype, view_of=t)
        if t.values is not None and len(t.shape) == 1:
            got.values = t.values[part]
        return got
    return Tensor(None, t.dtype, view_of=t)


def _split(t: Tensor, how: str, args: list, kwargs: dict) -> object:
    """`t.split(size)` / `t.chunk(n)` along dim 0 of a known shape: the pieces' shapes (how
    many micro-batches a batch makes)."""
    n = args[0] if args else kwargs.get("split_size_or_sections" if how == "split" else "chunks")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if dim != 0 or not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return UNK
    if not t.shape:
        # `targets.chunk(n)` beside `inputs.chunk(n)`: n pieces (fewer only when the tensor
        # has fewer than n rows); a split of unknown rows has no known count
        return tuple(Tensor(None, t.dtype) for _ in range(n)) if how == "chunk" else UNK
    rows = t.shape[0]
    size = n if how == "split" else -(-rows // n)
    if size <= 0 or rows // size > 4096:
        return UNK
    return tuple(Tensor((min(size, rows - k), *t.shape[1:]), t.dtype) for k in range(0, rows, size))


def tensor_element(t: Tensor, key: object) -> Tensor:
    """`t[k]`: a view of one row (one number, when `t`'s elements are known)."""
    got = Tensor(None, t.dtype, t.lo, t.hi, view_of=t)
    known = t.values is not None and t.shape is not None and len(t.shape) == 1
    if known and isinstance(key, int) and not isinstance(key, bool):
        assert t.values is not None
        if -len(t.values) <= key < len(t.values):
            got.shape, got.values = (), (t.values[key],)
    return got


def _tensor_method(m: TensorMethod, args: list, kwargs: dict) -> object:
    t, attr = m.tensor, m.attr
    if attr.endswith("_") and not attr.endswith("__"):
        t.forget_values()  # `fill_`, `add_`, `copy_`: written in place
    if attr in ("split", "chunk"):
        return _split(t, attr, args, kwargs)
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
    if attr == "item" and t.values is not None and len(t.values) == 1:
        return t.values[0]
    if attr == "tolist" and t.values is not None and t.shape == ():
        return t.values[0]
    if attr == "tolist" and t.values is not None and t.shape == (len(t.values),):
        return list(t.values)
    if attr in ("item",):
        if t.lo is not None and t.hi is not None:
            return Interval(t.lo, t.hi, t.fp)
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
        if isinstance(v, Raised):
            return v.message if kind is str and isinstance(v.message, str) else UNK
        if isinstance(v, Interval):
            return v if kind is float else UNK
        if isinstance(v, Tensor):
            if v.lo is not None and v.hi is not None and kind is float:
                return Interval(v.lo, v.hi, v.fp)
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


def _b_keyed(fn):
    """`sorted`/`min`/`max` with `key=` a function of the program (`sorted(layouts,
    key=lambda ranks: rank not in ranks)`): each element's key is the function's value on
    this rank, so the order (of group creation, say) is this rank's."""
    plain = _b_plain(fn)

    def f(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
        key = kwargs.get("key")
        if not isinstance(key, Fn):
            return plain(ev, args, kwargs, e)
        items = args[0] if len(args) == 1 else args
        if not isinstance(items, list | tuple | range | set | frozenset | dict):
            return UNK
        keys = [ev.call(key, [x], {}, e) for x in items]
        if not all(_is_known(k) for k in keys):
            return UNK
        rest = {k: v for k, v in kwargs.items() if k != "key"}
        if not all(_is_known(v) for v in rest.values()):
            return UNK
        ranked = list(zip(keys, items, strict=True))
        got = fn(ranked, key=lambda t: t[0], **rest)  # stable, as the program's own call
        return [t[1] for t in got] if fn is sorted else got[1]

    return f


class ListIter:
    """`iter(items)` of a list the evaluator knows: `next` takes its elements in order."""

    def __init__(self, items: list) -> None:
        self.items = items
        self.pos = 0


def _b_iter(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    if len(args) == 1 and isinstance(args[0], list | tuple | range | str):
        return ListIter(list(args[0]))
    if len(args) == 1 and isinstance(args[0], ListIter):
        return args[0]
    return UNK


def _b_next(ev: Rank, args: list, kwargs: dict, e: ast.Call) -> object:
    """`next(it)` of `iter(a known list)`, `next(x for x in items if ...)`: the next element
    (the evaluator builds a generator expression as a list), else the default, else
    StopIteration on this rank (its shard ran out first)."""
    if not args:
        return UNK
    if isinstance(args[0], ListIter):
        it = args[0]
        if it.pos < len(it.items):
            it.pos += 1
            return it.items[it.pos - 1]
    elif e.args and isinstance(e.args[0], ast.GeneratorExp) and isinstance(args[0], list):
        if args[0]:
            return args[0][0]
    else:
        return UNK
    if len(args) > 1:
        return args[1]
    raise Stop("exception", e.lineno, "StopIteration")


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
    "sorted": Builtin(_b_keyed(sorted)),
    "next": Builtin(_b_next),
    "iter": Builtin(_b_iter),
    "reversed": Builtin(_b_plain(reversed)),
    "enumerate": Builtin(_b_plain(enumerate)),
    "zip": Builtin(_b_plain(zip)),
    "min": Builtin(_b_keyed(min)),
    "max": Builtin(_b_keyed(max)),
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
