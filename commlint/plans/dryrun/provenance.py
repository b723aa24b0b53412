"""Value provenance inside one simulated rank: which tensors hold values the dry-run knows
(small real tensors, constants, values other ranks sent: `know`, `forget`, `to_value`,
`from_value`), which hold the same value on every rank (`UNIFORM`: made by a collective over
every rank, or computed from such), the small-real/fake policy (`SMALL_REAL`, random draws,
fills), finiteness tests, and the reductions that compute a collective's result."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Any

import torch
from torch._subclasses import fake_tensor as _fake_tensor
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree as pytree

from commlint.plans.dryrun import bookkeeping, fingerprint
from commlint.plans.dryrun.values import (
    MAX_VALUE_BYTES,
    Value,
)

_SCALAR = torch.ops.aten._local_scalar_dense.default
_DataDependent = _fake_tensor.DataDependentOutputException
_DYNAMO_WRAPPERS = (
    os.path.join("torch", "_compile.py"),
    os.path.join("torch", "_dynamo", "eval_frame.py"),
)
_AUTOGRAD_GRAPH = os.path.join("torch", "autograd", "graph.py")


def _read_by_autograd() -> bool:
    """Is the innermost Python frame below this dispatch the autograd engine's entry (so the
    read comes from C++ backward code, not from the program)?"""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.endswith(_DYNAMO_WRAPPERS):
        f = f.f_back
    return f is not None and f.f_code.co_filename.endswith(_AUTOGRAD_GRAPH)


# NaN/inf tests and what they give when every number is finite; any/all/not/or of them
# carry that value on (`torch.isnan(loss) or torch.isinf(loss)`, `isfinite(g).all()`)
_IF_FINITE = "_commlint_if_finite"
_aten = torch.ops.aten
_ELEMENTWISE = {
    _aten.isnan.default: False,
    _aten.isinf.default: False,
    _aten.isposinf.default: False,
    _aten.isneginf.default: False,
    _aten.isfinite.default: True,
}
_FINITE_TESTS = frozenset(
    {
        *_ELEMENTWISE,
        _aten.any.default,
        _aten.any.dim,
        _aten.all.default,
        _aten.all.dim,
        _aten.logical_not.default,
        _aten.bitwise_not.default,
        _aten.logical_or.default,
        _aten.bitwise_or.Tensor,
        _aten.logical_and.default,
        _aten.bitwise_and.Tensor,
    }
)


def _mark_finite_test(func: Any, args: tuple, out: Any) -> None:
    """Give `out` the value it has when every number is finite, when it is known."""
    if not isinstance(out, torch.Tensor):
        return
    if func in _ELEMENTWISE:
        value: Any = _ELEMENTWISE[func]
    else:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or not all(hasattr(a, _IF_FINITE) for a in tensors):
            return
        known = [getattr(a, _IF_FINITE) for a in tensors]
        if func in (_aten.logical_not.default, _aten.bitwise_not.default):
            value = not known[0]
        elif func in (_aten.logical_or.default, _aten.bitwise_or.Tensor):
            value = any(known)
        elif func in (_aten.logical_and.default, _aten.bitwise_and.Tensor):
            value = all(known)
        else:  # any / all of one uniform tensor
            value = known[0]
    with contextlib.suppress(AttributeError, TypeError):
        setattr(out, _IF_FINITE, value)


# collectives whose result every member holds alike
_UNIFORM_OPS = frozenset({"all_reduce", "broadcast", "all_gather"})
UNIFORM = "_commlint_uniform"  # set on a fake tensor that holds the same value on every rank


def _mark_uniform(tensors: Any) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(t, UNIFORM, True)


def is_uniform(t: Any) -> bool:
    return getattr(t, UNIFORM, False) is True


def _propagate_uniform(args: tuple, out: Any) -> None:
    """A small result (a norm, a mean, a count) computed only from uniform tensors and
    numbers is uniform too; one rank-local input makes it rank-local."""
    if not isinstance(out, _FakeTensor):
        return
    marked = is_uniform(out)  # an in-place op's result is its input, marked before
    if not marked and not small(out):
        return
    found = False
    for a in args:
        for t in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(t, torch.Tensor) and t is not out:
                if not is_uniform(t):
                    if marked:  # written with a rank-local value: rank-local now
                        with contextlib.suppress(AttributeError):
                            delattr(out, UNIFORM)
                    return
                found = True
    if found and not marked:
        _mark_uniform((out,))


def _placeholder(dtype: torch.dtype) -> Any:
    if dtype is torch.bool:
        return True
    return 1.0 if dtype.is_floating_point or dtype.is_complex else 1


# Real tensors up to this many elements are computed with for real (see `_small_real_only`).
SMALL_REAL = 64
_REAL_TYPES = (torch.Tensor, torch.nn.Parameter)


_VIEWS: dict[Any, bool] = {}


def _is_view(func: Any) -> bool:
    """An operation that only views its input (a slice, a reshape, a dtype view): no compute
    and no memory of its own, whatever the size."""
    found = _VIEWS.get(func)
    if found is None:
        schema = func._schema
        found = _VIEWS[func] = not schema.is_mutable and any(
            r.alias_info is not None for r in schema.returns
        )
    return found


# Operations that write arguments their schema does not mark written (argument indices): the
# batch norms' running mean and variance, updated when `training` (argument 5) is true.
_HIDDEN_WRITES = {
    getattr(torch.ops.aten, name).default: (3, 4)
    for name in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm")
    if hasattr(torch.ops.aten, name)
}


class DataDependentSize(Exception):
    """A communicated tensor's size depends on values fake tensors did not compute."""


def sized(t: torch.Tensor) -> bool:
    """Every dimension a plain number: not a data-dependent size (`nonzero`, `unique`,
    `bincount`, a boolean mask's selection: an unbacked symbol of the fake mode's ShapeEnv),
    which any comparison would raise on."""
    return all(type(d) is int for d in t.shape)


def small(t: torch.Tensor, limit: int = 0) -> bool:
    """At most `limit` (default `SMALL_REAL`) elements, known to be."""
    return sized(t) and t.numel() <= (limit or SMALL_REAL)


def _row(t: torch.Tensor) -> int | None:
    """Elements per row (dimension 0) of an all_to_all buffer, when known."""
    n = 1
    for d in t.shape[1:]:
        if type(d) is not int:
            return None
        n *= d
    return n


def _even_rows(t: torch.Tensor, parts: int) -> list[Any]:
    """Rows per member of an even all_to_all split (a symbol for a data-dependent size)."""
    rows = t.shape[0] if t.dim() else 1
    return [rows // parts if type(rows) is int else rows] * parts


def _small_real_only(args: tuple, kwargs: dict, func: Any = None) -> bool:
    """Tensor arguments (top level) all real CPU tensors of at most `SMALL_REAL` elements
    (of any size for a view: `torch.get_rng_state()[:8]`, torchtitan's seed), and at least
    one: a factory call (no tensor in) stays fake."""
    seen = False
    view = func is not None and _is_view(func)
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            if type(a) not in _REAL_TYPES or a.device.type != "cpu":
                return False
            if a.numel() > SMALL_REAL and not view:
                return False
            seen = True
        elif isinstance(a, list | tuple) and any(isinstance(x, torch.Tensor) for x in a):
            return False  # lists of tensors (cat, stack): left to the fake mode
    return seen


_aten_ops = torch.ops.aten
_RANDOM_FILLS = frozenset(
    getattr(getattr(_aten_ops, name), overload)
    for name, overload in (
        ("random_", "default"),
        ("random_", "from"),
        ("random_", "to"),
        ("uniform_", "default"),
        ("normal_", "default"),
        ("bernoulli_", "float"),
        ("exponential_", "default"),
    )
)


# draws from numbers alone (`torch.rand(1, generator=g)`, a data probe, a dropout coin; an MoE
# router's `torch.randint(0, experts, (16,))`; `randperm(8)`): drawn for real when small, and
# kept by the fake tensor as its value (`_small_draw`)
_RANDOM_DRAWS = frozenset({"rand", "randn", "normal", "randint", "randperm"})
# numbers made from numbers (`done = torch.zeros(1)`, then `done += 1`, then all-reduced and
# tested): small ones know their value, as a real run's do
_FILLED = frozenset({"zeros", "ones", "full", "arange", "scalar_tensor", "eye", "linspace"})


_KNOWN_FACTORIES = _RANDOM_DRAWS | _FILLED | bookkeeping.UNWRITTEN


def _small_draw(args: tuple, kwargs: dict, out: Any) -> bool:
    """A random draw (or a filled tensor, `_FILLED`) of at most `SMALL_REAL`
    elements (or an integer one of at most 4 MiB, `bookkeeping.py`) on the CPU, made of numbers only
    (no tensor argument, a CPU generator if any), whose fake result `out` has no value yet."""
    if not isinstance(out, _FakeTensor) or out.device.type != "cpu" or out.constant is not None:
        return False
    if not (small(out) or bookkeeping.fits(out)):
        return False
    if any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
        return False
    generator = kwargs.get("generator")
    return generator is None or generator.device.type == "cpu"


def _small_fake_cpu(args: tuple, kwargs: dict) -> bool:
    """A fake CPU tensor filled in place, by numbers only (no generator argument of another
    device, no tensor argument), that a real run's value is wanted for: integer bookkeeping
    (`bookkeeping.py`: accelerate's sampler seed, `torch.empty((), dtype=torch.int64)
    .random_()`, zeros until drawn), or a tensor of at most `SMALL_REAL` elements whose value
    is not known yet. A floating tensor that knows its value stays with FakeTensorMode's
    constant propagation (drawing it here as well segfaulted rank 0 in DTensor's dropout on a
    GPU mesh)."""
    target = args[0] if args else None
    if not isinstance(target, _FakeTensor) or target.device.type != "cpu":
        return False
    if not (bookkeeping.fits(target) or (small(target) and target.constant is None)):
        return False
    if any(isinstance(a, torch.Tensor) for a in (*args[1:], *kwargs.values())):
        return False
    generator = kwargs.get("generator")
    return generator is None or generator.device.type == "cpu"


def _constants(args: Any) -> list[tuple[Any, torch.Tensor]]:
    """The fake tensors among a call's arguments (lists included) that know their value."""
    out = []
    for a in pytree.arg_tree_leaves(*args):
        constant = getattr(a, "constant", None)
        if constant is not None and isinstance(a, _FakeTensor):
            out.append((a, constant))
    return out


def _is_real(t: Any) -> bool:
    if getattr(t, "constant", None) is not None:  # a fake tensor that knows its value
        return True
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == "cpu"


def _data(t: torch.Tensor) -> torch.Tensor:
    """The real data behind a tensor: itself, or a fake tensor's constant."""
    constant = getattr(t, "constant", None)
    return constant if constant is not None else t


def to_value(t: torch.Tensor) -> Value | None:
    """A small real tensor's content; None for fake, meta or large tensors."""
    t = _data(t)
    if not _is_real(t) or t.numel() * t.element_size() > MAX_VALUE_BYTES:
        return None
    with unset_fake_temporarily():
        flat = t.detach().contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return Value(str(t.dtype).removeprefix("torch."), tuple(t.shape), data)


def from_value(v: Value) -> torch.Tensor:
    dtype = getattr(torch, v.dtype)
    with unset_fake_temporarily():
        if not v.data:
            return torch.empty(v.shape, dtype=dtype)
        raw = torch.frombuffer(bytearray(v.data), dtype=torch.uint8)
        return raw.view(dtype).reshape(v.shape)


def know(t: Any, value: torch.Tensor) -> None:
    """Give fake tensor `t` a value (`t.constant`), registered with its fake mode like the
    constants it makes itself: an in-place write from a tensor without a value (`x.add_(y)`
    of a fake `y`, through any view of `x`) then forgets it instead of leaving a stale one."""
    t.constant = value
    t.fake_mode.fake_tensor_converter.add_constant_storage_mapping(t)


def _copy_parts(dst: torch.Tensor, parts: list[Any], views: Any) -> None:
    """Deliver one part per member into `dst` (all_gather, all_to_all): a real buffer part
    by part (its views share its memory), a fake one whole — only when every part is known
    (a value set on a fake view would not be the buffer's)."""
    if isinstance(dst, _FakeTensor):
        if all(p is not None for p in parts) and _receivable(dst):
            with unset_fake_temporarily():
                parts = [from_value(p) if isinstance(p, Value) else p for p in parts]
                whole = torch.cat([p.reshape(-1) for p in parts])
            _copy(dst, whole)
        return
    for p, view in zip(parts, views, strict=False):
        if p is not None:
            _copy(view, from_value(p) if isinstance(p, Value) else p)


def forget(t: Any) -> None:
    """A fake tensor's value is overwritten by communication: it is known again only if
    what arrives is (`_copy`), never kept from before (`done = torch.zeros(1)`, then an
    all_reduce a peer contributed an uncomputed value to)."""
    fingerprint.written(t)
    if isinstance(t, _FakeTensor) and t.constant is not None:
        t.fake_mode.fake_tensor_converter.invalidate_constant_aliases(t.constant)
        t.constant = None


def _receivable(t: Any) -> bool:
    """A buffer a received value can be delivered into: a real tensor, or a small fake CPU
    tensor (a pipeline's shape header, `torch.zeros(2)` then `recv`), which then knows it."""
    if _is_real(t):
        return True
    return (
        isinstance(t, _FakeTensor) and t.device.type == "cpu" and (small(t) or bookkeeping.fits(t))
    )


def _copy(dst: torch.Tensor, src: torch.Tensor | None) -> None:
    """Deliver a received value; a size that does not fit is left for the checker to report."""
    if src is None or not _receivable(dst):
        return
    if not _is_real(dst):  # a small fake buffer: the value becomes what it knows
        if src.numel() == dst.numel():
            with torch.no_grad(), unset_fake_temporarily():
                know(dst, src.reshape(tuple(dst.shape)).to(dst.dtype).clone())
        return
    dst = _data(dst)
    if src.numel() == dst.numel():
        with torch.no_grad(), unset_fake_temporarily():
            dst.copy_(src.reshape(dst.shape).to(dst.dtype))


def _reduce(values: list[torch.Tensor], op: str, factor: Any = None) -> torch.Tensor:
    with unset_fake_temporarily():
        return _reduce_real(values, op, factor)


def _reduce_real(values: list[torch.Tensor], op: str, factor: Any = None) -> torch.Tensor:
    if op in ("sum", "avg", "premul_sum"):
        out = functools.reduce(torch.add, values)
        if op == "premul_sum":  # every input scaled by the factor, then summed
            scale = _data(factor) if isinstance(factor, torch.Tensor) else factor
            return out * (scale if scale is not None else 1)
        return out / len(values) if op == "avg" else out
    fn = {
        "product": torch.mul,
        "min": torch.minimum,
        "max": torch.maximum,
        "band": torch.bitwise_and,
        "bor": torch.bitwise_or,
        "bxor": torch.bitwise_xor,
    }[op]
    return functools.reduce(fn, values)


_FakeTensor = _fake_tensor.FakeTensor
