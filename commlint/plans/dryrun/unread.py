"""Values read from fake tensors that the dry-run does not compute.

`loss.item()` on a fake tensor has no value. Most programs only print or log it, which needs
no value at all; re-running every rank with real tensors for that (the old behaviour) costs
the real model's compute and memory. So `.item()` and `.tolist()` on a fake tensor without
a value return an *unread* number: printing, formatting and arithmetic on it are free (the
result is unread too). The moment it steers the program — a comparison, a truth test, an
`int()`/index, a hash — it raises the fake-tensor limit it stands for, at that line, and the
dry-run falls back to real tensors as before (the note names the steering line), within its
real re-run budget. Past the budget, comparisons and truth tests become decisions (`_decide`,
symbolic steering): the placeholder's outcome on every rank, the other one explored for a
rank-local value. Each unread number carries the line that read it and whether it is the same
on every rank (read from a tensor a collective over every rank delivered).
Unread numbers print as 1 (a finite value, so `math.isfinite` and `math.log` checks that
merely log do not fail). `float(t)` / `int(t)` must return plain numbers: they give the
placeholder only where the program's bytecode shows the number never steers (`flow.py`).
"""

from __future__ import annotations

import bisect
import contextlib
import dis
import operator
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensor

from commlint.plans.dryrun import fingerprint, flow

_ITEM = torch.ops.aten._local_scalar_dense.default


class UnreadValueSteers(DataDependentOutputException):
    """A number read from a fake tensor decides what the program does next."""

    def __str__(self) -> str:
        return (
            "a value of a fake tensor (read with .item(), .tolist(), float() or int(), or the "
            "tensor tested itself) decides what the program does here, and fake tensors do "
            "not compute it"
        )


def _steer(self: Any, *a: Any) -> Any:
    raise UnreadValueSteers(_ITEM)


# Symbolic steering: when set (the dry-run may not compute the value, see `driver.py`), a
# comparison or truth test of an unread number asks it for the outcome instead of raising:
# `_decide(value, outcome_with_the_placeholder)` → the outcome the program gets.
# The third argument: when the test is an `assert`'s, the outcome that makes it hold (taken,
# never explored: a program's own value checks are assumed to pass), else None.
_decide: Callable[[Any, bool, bool | None], bool] | None = None


def _compare(name: str) -> Callable[..., Any]:
    def compare(self: Any, *a: Any) -> Any:
        if _decide is None:
            raise UnreadValueSteers(_ITEM)
        others = [float(x) if isinstance(x, UnreadFloat) else x for x in a]
        outcome = getattr(float, name)(float(self), *others)
        if outcome is NotImplemented:
            return outcome
        uniform = provenance(self) and all(provenance(x) for x in a if isinstance(x, UnreadFloat))
        value = _mark(UnreadFloat(float(self)), read_at(self), uniform, _combined(name, self, a))
        return _decide(value, bool(outcome), assertion_outcome(_testing_frame()))

    return compare


_INSTRUCTIONS: dict[Any, tuple[list[Any], dict[int, int]]] = {}


OWN_DIRS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # commlint/plans
)


def _testing_frame() -> Any:
    """The frame running the test: the first one out of torch and the dry-run (a tensor's
    `__bool__` goes through torch's function-mode dispatch first)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(OWN_DIRS):
        f = f.f_back
    return f


def assertion_outcome(frame: Any) -> bool | None:
    """When the test running in `frame` is an `assert`'s (the jump right after it skips a
    `raise AssertionError`), the outcome that makes the assertion hold; None otherwise."""
    if frame is None:
        return None
    code = frame.f_code
    cached = _INSTRUCTIONS.get(code)
    if cached is None:
        listed = list(dis.get_instructions(code))
        cached = _INSTRUCTIONS[code] = (listed, {ins.offset: k for k, ins in enumerate(listed)})
    listed, at = cached
    k = at.get(frame.f_lasti)
    if k is None:
        # inside a call, 3.11's `f_lasti` is the call's inline cache, not an instruction
        k = bisect.bisect_right([ins.offset for ins in listed], frame.f_lasti) - 1
        return _compared_with_a_constant(listed, k) if k >= 0 else None
    for j in (k, k + 1):  # the test is the jump itself, or the comparison just before it
        if j + 1 >= len(listed):
            return None
        name = listed[j].opname
        if name.startswith("POP_JUMP") and name.endswith(("IF_TRUE", "IF_FALSE")):
            if listed[j + 1].opname == "LOAD_ASSERTION_ERROR":
                return name.endswith("IF_TRUE")
            return None
    return _compared_with_a_constant(listed, k)


def _compared_with_a_constant(listed: list[dis.Instruction], k: int) -> bool | None:
    """`assert torch.allclose(a, b) is False` (accelerate's gradient-sync checks): the result
    of the call running at `k`, compared with True or False, decides the assertion; the result
    that makes it hold."""
    j = k + 1 if listed[k].opname == "PRECALL" else k
    if j + 4 >= len(listed) or listed[j].opname != "CALL":
        return None
    const, op, jump, then = listed[j + 1 : j + 5]
    jumps = jump.opname.startswith("POP_JUMP") and jump.opname.endswith(("IF_TRUE", "IF_FALSE"))
    if (
        const.opname != "LOAD_CONST"
        or not isinstance(const.argval, bool)
        or not jumps
        or then.opname != "LOAD_ASSERTION_ERROR"
    ):
        return None
    if op.opname == "IS_OP":
        negated = bool(op.arg)
    elif op.opname == "COMPARE_OP" and op.argval in ("==", "!="):
        negated = op.argval == "!="
    else:
        return None
    holds = jump.opname.endswith("IF_TRUE")  # the comparison's result that skips the raise
    return const.argval if holds != negated else not const.argval


def provenance(value: Any) -> bool:
    """True when an unread number is the same on every rank (read from a collective's
    result over every rank, or computed only from such values); False when rank-local."""
    return getattr(value, "_uniform", False)


def read_at(value: Any) -> str | None:
    """The line that read an unread number from a fake tensor (`loss.item()`)."""
    return getattr(value, "_read_at", None)


def fingerprint_of(value: Any) -> str | None:
    """How an unread number was made (`fingerprint.py`): equal on two ranks, equal values;
    None when that is not known."""
    return getattr(value, "_fingerprint", None)


def _combined(name: str, value: Any, others: tuple) -> str | None:
    """The fingerprint of `value <name> others`: None if any unread operand has none."""
    fps = [fingerprint_of(value)]
    fps += [fingerprint_of(x) if isinstance(x, UnreadFloat) else repr(x) for x in others]
    return None if None in fps else fingerprint.digest(name, *fps)


def _mark(value: Any, site: str | None, uniform: bool, fp: str | None = None) -> Any:
    value._read_at, value._uniform, value._fingerprint = site, uniform, fp
    return value


# Reads whose outcome the dry-run assumes instead of computing: (file suffix, function) of the
# reader -> (truth value, what is assumed). GradScaler's inf check: gradients are all-reduced
# (DDP) or its found-inf flags are (ShardedGradScaler), so every rank takes the same branch;
# the dry-run takes the common one, no inf/NaN, and says so in the trace's `meta.assumes`.
ASSUMED_TRUTH: dict[tuple[str, str], tuple[bool, str]] = {
    ("torch/amp/grad_scaler.py", "_maybe_opt_step"): (
        False,
        "GradScaler found no inf/NaN gradient (the optimizer steps on every rank alike)",
    ),
    # Megatron's tensor-parallel RNG fork compares the CPU RNG state before and after, to
    # log a warning (its weight initialisation, on every rank alike)
    ("megatron/core/tensor_parallel/random.py", "fork"): (
        True,
        "Megatron's CUDA RNG fork left the CPU RNG state as it was (its check only warns)",
    ),
}
_on_assume: Callable[[str], None] | None = None


def _truth(self: Any) -> bool:
    code = sys._getframe(1).f_code  # the function testing the value
    for (suffix, function), (truth, what) in ASSUMED_TRUTH.items():
        if code.co_name == function and code.co_filename.endswith(suffix):
            if _on_assume is not None:
                _on_assume(what)
            return truth
    if _decide is None:
        raise UnreadValueSteers(_ITEM)
    return _decide(self, bool(float(self)), assertion_outcome(_testing_frame()))


_STEERING = (
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__eq__",
    "__ne__",
    "__bool__",
    "__hash__",
    "__int__",
    "__index__",
    "__trunc__",
    "__floor__",
    "__ceil__",
    "is_integer",
)
_COMPARISONS = ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__")
_ARITHMETIC = (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pow__",
    "__rpow__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__round__",
)


def _unread_class(base: type) -> type:
    def make(name: str) -> Callable[..., Any]:
        op = getattr(base, name, None)

        def arithmetic(self: Any, *a: Any) -> Any:
            if op is None:
                return NotImplemented
            out = op(base(self), *a)
            if not isinstance(out, (int, float)):
                return out
            # the result is read where its first unread operand was; the same on every rank
            # only when every unread operand is
            others = [x for x in a if isinstance(x, UnreadFloat)]
            site = read_at(self) or next(map(read_at, others), None)
            uniform = provenance(self) and all(map(provenance, others))
            return _mark(cls(out), site, uniform, _combined(name, self, a))

        return arithmetic

    body: dict[str, Any] = {name: _steer for name in _STEERING if hasattr(base, name)}
    body.update({name: _compare(name) for name in _COMPARISONS})
    body["__index__"] = _steer
    body["__bool__"] = _truth
    body["__hash__"] = _steer
    body.update({name: make(name) for name in _ARITHMETIC})
    body["__doc__"] = f"A {base.__name__} read from a fake tensor: not computed."
    body["__reduce__"] = lambda self: (base, (base(self),))
    cls = type(f"Unread{base.__name__.title()}", (base,), body)
    return cls


UnreadFloat = _unread_class(float)
# An integer read is a float underneath too: an `int` subclass would be used by value (by
# `range`, indexing) without asking `__index__`, silently steering the program with a 1.
UnreadInt = type(
    "UnreadInt",
    (UnreadFloat,),
    {
        "__doc__": "An int read from a fake tensor: not computed.",
        "__repr__": lambda self: repr(int(float(self))),
        "__str__": lambda self: str(int(float(self))),
        "__format__": lambda self, spec: format(int(float(self)), spec),
    },
)


# Tensor factories and writes whose argument is data, not a size (position among the torch
# function's arguments, keyword): a number that did not get computed goes into a tensor there
# (`torch.tensor([loss.item()])`, DeepSpeed's `torch.tensor([float(norm)])`).
# (the flow analysis' tables, keyed by the torch functions; a method's self is argument 0)
INTO_TENSOR: dict[Any, tuple[int, str]] = {
    **{getattr(torch, name): at for name, at in flow.INTO_TENSOR_FUNCTIONS.items()},
    **{
        getattr(torch.Tensor, name): (position + 1, keyword)
        for name, (position, keyword) in flow.INTO_TENSOR_METHODS.items()
    },
    torch.Tensor.__setitem__: (2, "value"),  # `t[i] = x` (a store, not a call, in bytecode)
}
_WRITTEN_IN_PLACE = (torch.Tensor.fill_, torch.Tensor.__setitem__)


def _unread_leaves(data: Any, budget: int = 4096) -> tuple[bool, bool]:
    """(whether `data` holds an unread number, whether every one it holds is the same on
    every rank), looking into lists and tuples (up to `budget` leaves)."""
    found, uniform, todo = False, True, [data]
    while todo and budget > 0:
        x = todo.pop()
        budget -= 1
        if isinstance(x, UnreadFloat):
            found, uniform = True, uniform and provenance(x)
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
    return found, uniform


def into_tensor(func: Any, args: tuple, kwargs: dict, out: Any, caller: Any) -> Any:
    """A tensor made or written from a number fake tensors did not compute holds no value:
    the placeholder the number stands on (1) must not become a value the dry-run knows and
    then decides with as if computed. An unread number (`.item()`) is seen in the data; a
    plain placeholder (`float(t)`, which Python makes a plain float) by the call site the
    flow analysis let it go to (`flow.PENDING`). The tensor is the same on every rank only
    when every number in it is. Returns the tensor the program gets: a small one made (a
    real tensor, whose values the dry-run computes with) becomes a fake one without value."""
    from commlint.plans.dryrun.provenance import UNIFORM, forget

    position, name = INTO_TENSOR[func]
    data = args[position] if len(args) > position else kwargs.get(name)
    found, uniform = _unread_leaves(data)
    if flow.PENDING and caller is not None:
        pending = flow.PENDING.pop((caller.f_code, caller.f_lasti), None)
        flow.UNCONFIRMED.pop((caller.f_code, caller.f_lasti), None)
        if pending is not None:
            found, uniform = True, uniform and pending
    if not found:
        return out
    target = args[0] if func in _WRITTEN_IN_PLACE else out
    if not isinstance(target, torch.Tensor):
        return out
    local = getattr(target, "_local_tensor", target)  # a DTensor's shard
    if type(local) is torch.Tensor and target is out:
        mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        if mode is None:
            return out
        local = out = mode.fake_tensor_converter.from_real_tensor(mode, out)
    forget(local)
    with contextlib.suppress(AttributeError, TypeError):
        if uniform:
            setattr(local, UNIFORM, True)
        elif hasattr(local, UNIFORM):
            delattr(local, UNIFORM)
    return out


def _fake_underneath(t: torch.Tensor) -> bool:
    """A fake tensor, or a DTensor whose local shard is one (its read went through DTensor's
    redistribution, recorded as the collective it is, then reached the fake shard)."""
    if isinstance(t, FakeTensor):
        return True
    return isinstance(getattr(t, "_local_tensor", None), FakeTensor)


def _replicated_everywhere(t: torch.Tensor) -> bool:
    """A DTensor read with `.item()` is replicated over its mesh (DTensor redistributes it
    first); over a mesh of every rank, every rank holds the same value."""
    mesh = getattr(t, "device_mesh", None)
    if mesh is None or not isinstance(getattr(t, "_local_tensor", None), FakeTensor):
        return False
    import torch.distributed as dist

    try:
        return mesh.size() == dist.get_world_size()
    except (RuntimeError, ValueError):
        return False


def unread(
    dtype: torch.dtype, site: str | None = None, uniform: bool = False, fp: str | None = None
) -> Any:
    if dtype.is_floating_point or dtype.is_complex:
        return _mark(UnreadFloat(1.0), site, uniform, fp)
    return _mark(UnreadInt(1.0), site, uniform, fp)


def _nested(
    shape: tuple[int, ...], dtype: torch.dtype, site: str | None, uniform: bool, fp: str | None
) -> Any:
    if not shape:
        return unread(dtype, site, uniform, fp)
    return [
        _nested(shape[1:], dtype, site, uniform, fp and fingerprint.digest(fp, i))
        for i in range(shape[0])
    ]


def _when_fake(read: Callable[..., Any], instead: Callable[[Any], Any]) -> Callable[..., Any]:
    """`read` (a tensor method that reads its value); for a fake tensor without one,
    `instead(tensor)`, called while the fake limit is being handled (a bare `raise` in it
    keeps the limit)."""

    def reading(self: torch.Tensor) -> Any:
        try:
            return read(self)
        except DataDependentOutputException:
            if not _fake_underneath(self):
                raise
            given = instead(self)
            RAISED.clear()  # handled here: the program never saw it
            return given

    return reading


# Fake-tensor limits raised and not handled by the dry-run itself (message, site), noted by
# `child._note_fake_limits`: a program that catches one (`except Exception:` around `main()`)
# and then fails or exits with an error was stopped by it.
RAISED: list[tuple[str, str | None]] = []


def install(
    on_read: Callable[[], str | None],
    on_assume: Callable[[str], None] | None = None,
    is_uniform: Callable[[torch.Tensor], bool] | None = None,
    decide: Callable[[Any, bool, bool | None], bool] | None = None,
) -> None:
    """`Tensor.item` / `Tensor.tolist` return unread numbers for fake tensors with no
    value; `on_read` is called each time (to note where the program read one; it returns
    that line), `on_assume` with what was assumed when a known reader's truth test is
    answered (`ASSUMED_TRUTH`), `is_uniform` tells whether a tensor holds the same value on
    every rank, and `decide` (symbolic steering) gives the outcome of a comparison or truth
    test of an unread number instead of the fake-tensor limit."""
    global _on_assume, _decide
    _on_assume, _decide = on_assume, decide
    uniform = is_uniform or (lambda t: False)

    def same(t: torch.Tensor) -> bool:
        return uniform(t) or _replicated_everywhere(t)

    def made(self: torch.Tensor, steers: bool = True) -> str | None:
        """How the tensor read was made (`fingerprint.py`), noted as read unless the number
        can never steer the program."""
        fp = fingerprint.of(self)
        if steers:
            fingerprint.read(fp)
        return fp

    def may_steer(self: torch.Tensor) -> bool:
        # a number only printed, logged or computed with (`print(f"{loss.item():.3f}")` on
        # rank 0 alone) never steers: later decisions do not depend on it (`flow.py`). Asked
        # with fingerprints off too: a number made a tensor's data on the way, where it may
        # be a plain number by then (`torch.full(size, math.sqrt(x.item()))`), must reach a
        # tensor that knows no value (that call is told), not one holding the placeholder.
        steers = not flow.only_computed_with(_testing_frame(), placeholder_uniform=same(self))
        return steers or not fingerprint.enabled()

    def unread_item(self: torch.Tensor) -> Any:
        return unread(self.dtype, on_read(), same(self), made(self, may_steer(self)))

    def unread_list(self: torch.Tensor) -> Any:
        fp = made(self, may_steer(self))
        return _nested(tuple(self.shape), self.dtype, on_read(), same(self), fp)

    def decided_bool(self: torch.Tensor) -> bool:
        # `if loss > 10:` tests a fake tensor itself: with symbolic steering, a decision as
        # for an unread number (taken as False: a loop on it ends), else the fake limit
        if _decide is None:
            raise UnreadValueSteers(_ITEM) from None
        held = assertion_outcome(_testing_frame())
        number = unread(torch.float32, on_read(), same(self), made(self))
        return _decide(number, False, held)

    def converted(integer: bool) -> Callable[[torch.Tensor], Any]:
        def placeholder_or_limit(self: torch.Tensor) -> Any:
            # `float(loss)`: Python makes whatever this returns a plain number, so an unread
            # one cannot be given. The placeholder is given only when the program's bytecode
            # shows the number is never tested, used as a size or index, or kept beyond the
            # caller's reach (`flow.py`); else the fake limit, as for a test.
            caller = sys._getframe(2)  # past the dry-run's own torch-function layer
            while caller is not None and caller.f_code.co_filename.startswith(OWN_DIRS[1]):
                caller = caller.f_back
            placeholder = 1 if integer else 1.0
            if flow.only_computed_with(caller, integer, placeholder_uniform=same(self)):
                on_read()
                made(self, steers=False)
                return placeholder
            test = flow.tested_at_once(caller)
            if test is None:
                raise  # the fake limit being handled
            if _decide is None:  # a test: the limit says so (symbolic steering decides it)
                raise UnreadValueSteers(_ITEM) from None
            # symbolic steering: `if float(loss) > 10:` is a decision like a test of an
            # unread number; the number given makes the test come out as decided
            op, other, left, holds = test

            def outcome(v: float) -> bool:
                if op is None:
                    return bool(v)
                return bool(getattr(operator, op)(*((v, other) if left else (other, v))))

            number = unread(torch.float32, on_read(), same(self), made(self))
            # the number it is compared with counts too (`if float(loss) > 5.0 + rank:`)
            fingerprint_with = _combined(op or "truth", number, () if other is None else (other,))
            number = _mark(number, read_at(number), provenance(number), fingerprint_with)
            chosen = _decide(number, outcome(1), holds)
            near = () if other is None else (other, other - 1, other + 1, other - 0.5)
            for v in (placeholder, 0, *near, -1):
                given = int(v) if integer else float(v)
                if outcome(given) == chosen:
                    return given
            raise

        return placeholder_or_limit

    torch.Tensor.__float__ = _when_fake(torch.Tensor.__float__, converted(False))  # type: ignore[method-assign]
    torch.Tensor.__int__ = _when_fake(torch.Tensor.__int__, converted(True))  # type: ignore[method-assign]
    torch.Tensor.item = _when_fake(torch.Tensor.item, unread_item)
    torch.Tensor.tolist = _when_fake(torch.Tensor.tolist, unread_list)
    torch.Tensor.__bool__ = _when_fake(torch.Tensor.__bool__, decided_bool)  # type: ignore[method-assign]

    def decided_equal(compare: Callable[..., bool]) -> Callable[..., bool]:
        # `torch.equal(a, b)` (`allclose`) of fake tensors tests their values, as `bool(t)`: the
        # fake limit (a test), a decision under symbolic steering (taken as equal: what the
        # placeholders give); `assert torch.equal(...)` is taken to hold
        def equal(a: Any, b: Any, *rest: Any, **k: Any) -> bool:
            try:
                return compare(a, b, *rest, **k)
            except DataDependentOutputException:
                tensors = [t for t in (a, b) if isinstance(t, torch.Tensor)]
                if not any(_fake_underneath(t) for t in tensors):
                    raise
                if _decide is None:
                    raise UnreadValueSteers(_ITEM) from None
                held = assertion_outcome(_testing_frame())
                alike = all(same(t) for t in tensors)
                fps = [made(t) for t in tensors]  # made alike when both operands are
                fp = None if None in fps else f"equal({', '.join(map(str, fps))})"
                number = unread(torch.float32, on_read(), alike, fp)
                got = _decide(number, True, held)
                RAISED.clear()
                return got

        return equal

    for name in ("equal", "allclose"):
        setattr(torch, name, decided_equal(getattr(torch, name)))
        setattr(torch.Tensor, name, decided_equal(getattr(torch.Tensor, name)))

    from torch.utils._pytree import tree_leaves

    def held_or_steers(check: Callable[..., Any]) -> Callable[..., Any]:
        # `torch.testing.assert_close(actual, expected)` of fake tensors: an assertion of
        # their values (it only raises AssertionError), taken to hold as an `assert` of one is
        # (symbolic steering); without it, the test it is (a fake limit)
        def assert_close(actual: Any, expected: Any, *a: Any, **k: Any) -> Any:
            tensors = [t for t in tree_leaves((actual, expected)) if isinstance(t, torch.Tensor)]
            if not any(_fake_underneath(t) for t in tensors):
                return check(actual, expected, *a, **k)
            if _decide is None:
                raise UnreadValueSteers(_ITEM)
            number = unread(torch.float32, on_read(), all(same(t) for t in tensors))
            _decide(number, True, True)
            return None

        return assert_close

    torch.testing.assert_close = held_or_steers(torch.testing.assert_close)
    to_numpy = torch.Tensor.numpy

    def fake_numpy(self: torch.Tensor, *, force: bool = False) -> Any:
        # `.numpy()` refuses tensor subclasses: a fake tensor that knows its value gives a
        # copy of it, one that does not an array of unread numbers (as `.tolist()` gives)
        if not isinstance(self, FakeTensor):
            return to_numpy(self, force=force)
        if self.constant is not None:
            return to_numpy(self.constant.detach(), force=True).copy()
        import numpy

        return numpy.array(unread_list(self), dtype=object)

    torch.Tensor.numpy = fake_numpy  # type: ignore[method-assign]
