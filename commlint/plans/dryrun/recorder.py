"""Inside one simulated rank: the recording process group and everything it needs.

`Recorder` is installed in a forked child before the user's script runs. Whatever backend the
script asks for becomes the `commlint` backend, a Python `ProcessGroup` that records every call
(Python `dist.*`, DDP's C++ reducer, FSDP2, pipelining p2p, coalesced calls) and never blocks:
receives are filled from the values other ranks sent in the previous pass (see `values.py`),
or, before those are known, as if every rank had sent what this one sent. A dispatch-level
recorder catches functional collectives on fake/meta tensors, which never reach a process group.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses import fake_tensor as _fake_tensor
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.futures import Future
from torch.utils import _pytree as pytree

from commlint import callsites
from commlint.callsites import USER_PROGRAMS as USER_PROGRAMS
from commlint.plans.dryrun import bookkeeping, fingerprint
from commlint.plans.dryrun.values import (
    MAX_FILE_BYTES,
    MAX_VALUE_BYTES,
    Key,
    Value,
    ValueTable,
    WrittenFiles,
)
from commlint.trace import TORCH_ISSUED

BACKEND = "commlint"
_open, _stat = open, os.stat  # the real ones: a rank's `open` is wrapped (see files.FileView)
_TORCH_DIR = str(Path(torch.__file__).parent) + os.sep
_C10D_FILE = os.sep + os.path.join("distributed", "distributed_c10d.py")

_REDUCE_NAMES = {t: t.name.lower() for t in dist.ReduceOp.RedOpType.__members__.values()}
# Blocking Python APIs whose Work the API itself waits for: that wait is not an action.
_ASYNC_APIS = frozenset({"isend", "irecv", "batch_isend_irecv"})


class StopRank(BaseException):
    """Raised inside a rank to stop it: the time limit or the `--steps` limit was reached."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def is_user_file(filename: str) -> bool:
    """A frame of the user's program: not torch, commlint, the standard library or an
    installed package (`commlint.callsites`, shared with the guard)."""
    return callsites.is_user_file(filename)


def short_path(filename: str) -> str:
    return _short_path(filename, os.getcwd())


@functools.lru_cache(maxsize=4096)
def _short_path(filename: str, cwd: str) -> str:
    try:
        rel = os.path.relpath(filename, cwd)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def user_site(frames: list[Any]) -> tuple[str | None, list[str]]:
    """(site of the innermost user frame, stack: torch API frame first, then user frames)."""
    stack: list[str] = []
    site = None
    for i, f in enumerate(frames):
        name = f.f_code.co_filename
        if name.endswith(_RUNPY) or name == "<frozen runpy>":
            break  # the frames that ran the script: the dry-run's own, or its caller's
        if not is_user_file(name):
            continue
        if site is None:
            site = f"{short_path(name)}:{f.f_lineno}"
            api = _api_frame(frames[:i])
            if api is not None:
                torch_rel = api.f_code.co_filename[len(_TORCH_DIR) - len("torch/") :]
                stack.append(f"{torch_rel}:{api.f_lineno} in {api.f_code.co_name}")
        stack.append(f"{short_path(name)}:{f.f_lineno} in {f.f_code.co_name}")
        if len(stack) >= 8:
            break
    return site, stack


def framework_frame(frames: list[Any]) -> str | None:
    """The innermost installed-package frame (not torch) between the user's frame and
    torch's: the framework code that made the call for the user (Megatron's pipeline
    schedule, a trainer's all_gather), as `package/path.py:line in function`."""
    return callsites.framework_frame(frames)


_RUNPY = os.sep + "runpy.py"
_WRAPPER_FILES = ("c10d_logger.py", "functools.py", "contextlib.py", "_contextlib.py")


def _api_frame(inner: list[Any]) -> Any:
    """The torch function the user called: the frame next to the user's, minus decorators."""
    for f in reversed(inner):
        name = f.f_code.co_filename
        if name.startswith(_TORCH_DIR) and not name.endswith(_WRAPPER_FILES):
            return f
    return None


def _frames(skip: int = 2) -> list[Any]:
    f = sys._getframe(skip)
    out = []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


_API_WRAPPERS = (
    os.path.join("distributed", "c10d_logger.py"),
    os.path.join("torch", "_compile.py"),
    os.path.join("_dynamo", "eval_frame.py"),
    os.path.join("utils", "_contextlib.py"),
    os.path.join("typing_extensions.py"),
)


def _c10d_api(frames: list[Any]) -> tuple[str | None, dict[str, Any], str | None]:
    """The outermost torch.distributed API function on the stack, its locals, and the
    function of torch's own code (not the program's) that called it, if torch's code did."""
    found, outside = _api_and_caller(frames)
    if found is None:
        return None, {}, None
    caller = None
    if outside is not None:
        name = outside.f_code.co_filename
        if name.startswith(_TORCH_DIR) and not is_user_file(name):
            caller = outside.f_code.co_name
    return found.f_code.co_name, found.f_locals, caller


def _api_and_caller(frames: list[Any]) -> tuple[Any, Any]:
    """(the outermost torch.distributed API frame on the stack, the frame that called it —
    past torch.distributed's own decorators, `_exception_logger`, ...), None when absent."""
    outer = None
    for i, f in enumerate(frames):
        if f.f_code.co_filename.endswith(_C10D_FILE):
            outer = i
    if outer is None:
        return None, None
    outside = (f for f in frames[outer + 1 :] if not f.f_code.co_filename.endswith(_API_WRAPPERS))
    return frames[outer], next(outside, None)


def _on_the_gpu_for_nccl(api: str, tensors: list[Any], frames: list[Any]) -> None:
    """A tensor the program gives a collective of an NCCL-only group from its own code is
    on a GPU, or the GPUs raise here (torch has no CPU backend for that group): as they do.
    Only the program's own calls are checked, and only tensors its own code made on (or
    moved to) the CPU (`devices.on_the_cpu`): one torch or a framework made may be on the GPU
    in the real job though it reports the CPU here."""
    from commlint.plans.dryrun import devices

    _, caller = _api_and_caller(frames)
    if caller is None or not is_user_file(caller.f_code.co_filename):
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and devices.on_the_cpu(t):
            raise RuntimeError(
                f"No backend type associated with device type cpu: {api} of a CPU tensor on "
                "a group whose only backend is NCCL (move it to the GPU first, e.g. "
                "`.cuda()` or `device=`, or give the group a CPU backend: "
                '`backend="cpu:gloo,cuda:nccl"`)'
            )


_DDP_PHASES = {
    "_pre_forward": "DDP bucket rebuild",
    "_sync_module_states": "DDP parameter broadcast",
    "_verify_param_shape_across_processes": "DDP model check",
}


def _cpp_origin(frames: list[Any]) -> str:
    names = [f.f_code.co_filename for f in frames]
    if any("_functional_collectives" in n for n in names):
        return "functional collective"
    for f in frames:
        if f.f_code.co_name in _DDP_PHASES and f.f_code.co_filename.startswith(_TORCH_DIR):
            return _DDP_PHASES[f.f_code.co_name]
    if any(os.sep + "autograd" + os.sep in n for n in names):
        return "DDP gradient bucket"
    return TORCH_ISSUED


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
    """A fake CPU tensor of at most `SMALL_REAL` elements filled in place, by numbers only
    (no generator argument of another device, no tensor argument)."""
    target = args[0] if args else None
    if not isinstance(target, _FakeTensor) or target.device.type != "cpu":
        return False
    if not (small(target) or bookkeeping.fits(target)):
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


class _Shared:
    """Objects that hold (or reach) the rank's pipe to the parent are shared by copies:
    `copy.deepcopy(model)` (EMA/teacher copies, pipeline-stage splits) must never copy the
    pipe — a copied `Connection` closes the real descriptor when it is collected, and the
    rank can no longer report anything."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return self


class RecordedWork(_Shared, dist.Work):
    """The work handle of a recorded call: complete at once; waiting on it is an action."""

    def __init__(self, recorder: Recorder, handle: str | None, result: list[torch.Tensor]):
        super().__init__()
        self._recorder = recorder
        self._handle = handle
        self._result = result
        self._waited = handle is None
        self._source = 0

    def wait(self, timeout: Any = None) -> bool:
        if not self._waited:
            self._waited = True
            self._recorder.emit({"op": "wait", "handles": [self._handle]})
        return True

    def get_future(self) -> Future:
        # DDP waits for its buckets in C++ at the end of backward: record that wait before
        # the rank's next action.
        if not self._waited:
            self._waited = True
            self._recorder.deferred_waits.append(self._handle)
        fut: Future = Future()
        fut.set_result(self._result)
        return fut

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._result

    def source_rank(self) -> int:
        """The group rank a receive got its message from (`recv(src=None)` returns it)."""
        return self._source

    _source_rank = source_rank  # the name torch's recv(src=None) calls

    def synchronize(self) -> None:
        return None


class Recorder(_Shared):
    """Per-rank recording state. `send` is how messages reach the parent."""

    def __init__(self, rank: int, world_size: int, table: ValueTable, send: Callable) -> None:
        self.rank = rank
        self.world_size = world_size
        self.table = table
        self.send = send
        self.torch_names: dict[str, tuple[str, list[int]]] = {}
        self.group_counts: dict[tuple[int, ...], int] = {}
        self.seq: dict[str, int] = {}
        self.p2p_seq: dict[tuple, int] = {}
        self.handles = 0
        self.batches = 0
        self.batch: str | None = None
        self.deferred_waits: list[str] = []
        self.requested_backend: str | None = None
        self.group_backends: dict[str, str] = {}  # torch group name -> backend asked for
        self.from_cpp = False
        self.live: Callable[[Key, list[int]], dict[int, Any] | None] | None = None
        self.uniform_made = False  # a collective over every rank delivered a fake tensor
        self.bucket = 0  # index of the next DDP gradient bucket in this backward
        self.stream: str | None = None
        self.functional_handles: dict[int, str] = {}
        self.functional_waited: set[str] = set()
        # the rank's view of the filesystem (`files.FileView`), handed over at barriers
        self.written: set[str] = set()  # files this rank wrote since its last barrier
        self.removed: set[str] = set()  # files and folders it removed since then
        self.made: set[str] = set()  # folders it made since then
        self.dirs: set[str] = set()  # folders that exist for this rank only
        self.delivered: dict[str, bytes] = {}  # files other ranks wrote before a barrier
        # a file this rank appended to, or wrote to after a barrier handed it over: its own
        # copy (a scratch path), which the next barrier's merged version replaces
        self.private: dict[str, str] = {}
        self.gone: set[str] = set()  # files and folders removed for this rank (not on disk)

    def take_written(self) -> WrittenFiles | None:
        """The files written, removed and folders made since the last barrier, as they are
        now; starts a new epoch."""
        if not self.written and not self.removed and not self.made:
            return None
        files = []
        for path in sorted(self.written):
            if path not in self.private:  # a handed-over file it renamed
                if path in self.delivered:
                    files.append((path, self.delivered[path]))
                continue
            try:
                where = self.private[path]
                size = _stat(where).st_size
                with _open(where, "rb") as fh:
                    files.append((path, fh.read() if size <= MAX_FILE_BYTES else None))
            except OSError:
                continue
        removed, made = tuple(sorted(self.removed)), tuple(sorted(self.made))
        self.written, self.removed, self.made = set(), set(), set()
        return WrittenFiles(tuple(files), removed, made) if files or removed or made else None

    # -- messages --------------------------------------------------------------------------

    def emit(self, action: dict[str, Any], frames: list[Any] | None = None) -> None:
        if action.get("op") != "wait":
            self.flush()
        if threading.current_thread() is not threading.main_thread():
            action["thread"] = threading.current_thread().name
        if self.stream is not None:
            action["stream"] = self.stream
        frames = frames if frames is not None else _frames()
        site, stack = user_site(frames)
        if site:
            action["site"] = site
            action["stack"] = stack
            via = framework_frame(frames)
            if via:
                action["via"] = via
        self.send(("a", action))

    def flush(self) -> None:
        """Record DDP's deferred bucket waits (see `RecordedWork.get_future`), if any."""
        if self.deferred_waits:
            handles, self.deferred_waits = self.deferred_waits, []
            self.send(("a", {"op": "wait", "handles": handles, "label": "DDP bucket wait"}))

    def new_group(self, torch_name: str, ranks: list[int]) -> str:
        if len(ranks) == self.world_size and not self.torch_names:
            name = "WORLD"
        else:
            name = "g" + _compact(ranks)
            count = self.group_counts.get(tuple(ranks), 0) + 1
            self.group_counts[tuple(ranks)] = count
            if count > 1:
                name += f"#{count}"
            self.send(("g", name, list(ranks)))
        self.torch_names[torch_name] = (name, list(ranks))
        return name

    def next_handle(self) -> str:
        self.handles += 1
        return f"h{self.handles}"

    def contribute(self, key: Key, value: Any) -> None:
        if value is not None:
            self.send(("v", key, value))
        elif self.live is not None:
            self.send(("v0", key))  # sent nothing: a peer waiting for it need not wait

    def receive(self, key: Key, senders: list[int] | None = None) -> dict[int, Any]:
        """What the other ranks sent for `key`: asked live of the parent when the senders
        are known and the pass runs them at once (`channel.Live`), else the previous pass's."""
        others = [r for r in senders or () if r != self.rank]
        got = self.live(key, others) if self.live is not None and others else None
        if got is not None:
            now = ValueTable({key: dict(got)}, exact_model=self.table.exact_model)
            self.send(("r", key, now.signature(key, self.rank)))
            return got
        self.send(("r", key, self.table.signature(key, self.rank)))
        return {r: v for r, v in self.table.contributions(key).items() if r != self.rank}

    # -- recording one call -----------------------------------------------------------------

    def _nccl_only(self, group: str) -> bool:
        """Whether the program asked for NCCL alone on this group (the default group's
        backend, or new_group's): it takes no CPU tensor."""
        backends = {
            str(self.group_backends.get(name, "")).lower()
            for name, (label, _) in self.torch_names.items()
            if label == group
        }
        return backends == {"nccl"}

    def record(
        self,
        op: str,
        group: str,
        tensors: list[torch.Tensor],
        *,
        frames: list[Any],
        peer: int | None = None,
        root: int | None = None,
        tag: int = 0,
        reduce_op: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str | None:
        """Emit the action (`frames`: the caller's stack); return its handle when the caller
        gets an async work."""
        unsized = next((t for t in tensors if not sized(t)), None)
        if unsized is not None:
            raise DataDependentSize(
                f"the tensor given to {op} has a data-dependent size "
                f"{tuple(unsized.shape)} (nonzero, unique, bincount, a boolean mask): fake "
                "tensors do not know how many elements each rank sends"
            )
        api, local, caller = _c10d_api(frames)
        if api is not None and caller is None and tensors and self._nccl_only(group):
            _on_the_gpu_for_nccl(api, tensors, frames)
        action: dict[str, Any] = {"op": op, "group": group}
        handle = None
        self.from_cpp = api is None
        if api is None and _cpp_origin(frames) == "functional collective":
            # A functional collective of real tensors (a small count): its Work completes at
            # once, so torch never registers it for `wait_tensor`, and the result is waited
            # for before any use (AsyncCollectiveTensor): the blocking call it amounts to.
            action["label"] = "functional collective"
        elif api is None:
            # Issued from C++ (DDP's reducer, functional collectives): asynchronous, waited
            # through its Work or future.
            handle = self.next_handle()
            action["async"] = True
            action["handle"] = handle
            action["label"] = _cpp_origin(frames)
            if action["label"] == "DDP gradient bucket":
                action["bucket"] = self.bucket
                self.bucket += 1
        elif op in ("send", "recv"):
            if api in _ASYNC_APIS or self.batch:
                handle = self.next_handle()
                action["op"] = "i" + op
                action["handle"] = handle
        elif local.get("async_op") or (api == "_coalescing_manager" and local.get("async_ops")):
            handle = self.next_handle()
            action["async"] = True
            action["handle"] = handle
        if api and api not in {op, "i" + op} and not api.startswith("_"):
            action.setdefault("label", api)
        if caller is not None:
            label = action.get("label")
            issued = f"{TORCH_ISSUED} ({caller})"
            action["label"] = f"{label}, {issued}" if label else issued
        if self.batch and op in ("send", "recv"):
            action["batch"] = self.batch
        if peer is not None:
            action["peer"] = peer
        if root is not None:
            action["root"] = root
        if tag:
            action["tag"] = tag
        if reduce_op:
            action["reduce_op"] = reduce_op
        if len(tensors) > 1:  # coalesced: one op over several tensors
            if all(sized(t) for t in tensors):
                action["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
            action["dtype"] = str(tensors[0].dtype).removeprefix("torch.")
            action["label"] = f"coalesced, {len(tensors)} tensors"
        elif tensors:
            t = tensors[0]
            if sized(t):  # a data-dependent size is not known: the checker takes any size
                action["shape"] = list(t.shape)
            action["dtype"] = str(t.dtype).removeprefix("torch.")
        if extra:
            action.update(extra)
        self.emit(action, frames)
        return handle

    def sync(self, label: str) -> None:
        self.emit({"op": "sync", "label": label}, _frames(3))

    def filled_alike(self, group_size: int, outputs: Any) -> None:
        """A collective that gives every member the same result (all_reduce, broadcast,
        all_gather) filled `outputs`: over every rank, they hold the same value everywhere."""
        if group_size == self.world_size:
            self.uniform_made = True
            _mark_uniform(outputs)
            fingerprint.delivered_alike(outputs)


def _compact(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if rs == list(range(rs[0], rs[-1] + 1)) and len(rs) > 2:
        return f"{rs[0]}-{rs[-1]}"
    return "_".join(str(r) for r in ranks)


def merge_writes(versions: list[bytes]) -> bytes:
    """A file as several members left it before a barrier, each from the same start: the
    start (their common prefix), then what each appended, in rank order — one of the orders a
    real run can give (identical versions stay as they are)."""
    lo, hi = min(versions), max(versions)  # the common prefix of all is theirs
    n = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=False)) if a != b), len(lo))
    return lo[:n] + b"".join(v[n:] for v in versions)


class RecordingProcessGroup(_Shared, dist.ProcessGroup):
    """A backend that records calls, fills outputs from the value table, and never blocks."""

    def __init__(self, recorder: Recorder, rank: int, ranks: list[int], torch_name: str):
        super().__init__(rank, len(ranks))
        self._rec = recorder
        self._me = rank
        self._ranks = list(ranks)
        self._torch_name = torch_name
        self._name = recorder.new_group(torch_name, self._ranks)

    # accessors torch needs of a Python process group
    def getBackendName(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:
        return self._torch_name

    def getGroupName(self) -> str:
        return self._torch_name

    def setGroupName(self, name: str) -> None:
        self._torch_name = name

    def _set_group_name(self, name: str) -> None:
        self._torch_name = name

    @property
    def supports_coalescing(self) -> bool:
        return False

    # helpers
    def _next(self, op: str) -> Key:
        # The op is part of the key: a backend never pairs two different collectives (both
        # sides hang), so their values never meet either — and a mismatched program's passes
        # settle instead of feeding an all_reduce's tuple to a broadcast.
        n = self._rec.seq.get(self._name, 0)
        self._rec.seq[self._name] = n + 1
        return ("c", self._name, n, op)

    def _work(self, handle: str | None, result: list[torch.Tensor]) -> RecordedWork:
        return RecordedWork(self._rec, handle, result)

    def _coll(
        self,
        op: str,
        tensors: list[torch.Tensor],
        contribution: Any,
        result: list[torch.Tensor],
        **kw: Any,
    ) -> tuple[RecordedWork, dict[int, Any] | None]:
        key = self._next(op)
        handle = self._rec.record(op, self._name, tensors, frames=_frames(3), **kw)
        work = self._work(handle, result)
        for t in result:
            fingerprint.written(t)  # what it held before is gone
        if self._rec.from_cpp:
            # Gradient buckets and parameter broadcasts of DDP/functional collectives carry
            # model data: with real tensors they are exchanged (programs check gradient sync,
            # comm hooks read them) under a key whose signature is who contributed, not what
            # — a rank runs again once its peers' buckets exist, never because their values
            # moved (unseeded data would make the passes churn). Fake ones carry nothing: their
            # outputs are filled as if every rank had sent what this one sent.
            if not any(_is_real(t) for t in result) or contribution is None:
                return work, {}
            model_key = ("m", *key[1:])
            self._rec.contribute(model_key, contribution)
            return work, self._rec.receive(model_key, self._ranks)
        self._rec.contribute(key, contribution)
        for t in result:
            forget(t)  # a fake buffer knows only what this call delivers into it
        wants = any(_receivable(t) for t in result)
        got = self._rec.receive(key, self._ranks) if wants else None
        return work, got

    def _part(self, got: dict[int, Any] | None, member: int, own: Any, buffer: Any) -> Any:
        """What `member` contributed; a missing one (not known yet) is the rank's own for a
        real buffer (until the next pass brings it), None — unknown — for a fake one."""
        if member == self._me:
            return own
        v = self._from(got, member, None)
        if v is None and not isinstance(buffer, _FakeTensor):
            return own
        return v

    def _from(self, got: dict[int, Any] | None, member: int, default: Any) -> Any:
        if got is None:
            return default
        v = got.get(self._ranks[member])
        return default if v is None else v

    @staticmethod
    def _reduce_name(opts: Any) -> str:
        # `opts.reduceOp` is a ReduceOp object, which hashes like its RedOpType but is never
        # equal to it as a dict key: look the type up through `.op`.
        op = getattr(opts, "reduceOp", None)
        return _REDUCE_NAMES.get(getattr(op, "op", op), "sum")

    @staticmethod
    def _factor(opts: Any) -> Any:
        """premul_sum's factor (a number or a one-element tensor); None for other ops."""
        op = getattr(opts, "reduceOp", None)
        if getattr(op, "op", None) != dist.ReduceOp.RedOpType.PREMUL_SUM:
            return None  # torch raises when any other op is asked for its factor
        return op.factor

    # collectives
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        red = self._reduce_name(opts)
        vals = tuple(to_value(t) for t in tensors)
        work, got = self._coll("all_reduce", tensors, vals, tensors, reduce_op=red)
        if got is not None:
            for i, t in enumerate(tensors):
                if vals[i] is None:
                    continue
                parts = []
                local = from_value(vals[i])
                fake = isinstance(t, _FakeTensor)
                for m in range(len(self._ranks)):
                    v = vals if m == self._me else self._from(got, m, None)
                    if v is None or v[i] is None:
                        if fake:  # a peer's value is not known: neither is the sum
                            break
                        v = vals  # real tensors: the rank's own until the peer's is known
                    part = from_value(v[i])
                    # A peer's buffer of another shape is the program's bug (the checker
                    # reports CL204 from the recorded shapes), not a reason for the recorder
                    # to raise: reduce what lines up, keep the local value otherwise.
                    if isinstance(part, torch.Tensor) and isinstance(local, torch.Tensor):
                        part = part.reshape(local.shape) if part.numel() == local.numel() else local
                    parts.append(part)
                if len(parts) == len(self._ranks):
                    _copy(t, _reduce(parts, red, self._factor(opts)))
        self._rec.filled_alike(len(self._ranks), tensors)
        return work

    allreduce_coalesced = allreduce

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        root = opts.rootRank
        mine = root == self._me
        vals = tuple(to_value(t) for t in tensors) if mine else None
        work, got = self._coll(
            "broadcast", tensors, vals, [] if mine else tensors, root=self._ranks[root]
        )
        src = self._from(got, root, None)
        if src is not None:
            for t, v in zip(tensors, src, strict=False):
                _copy(t, from_value(v) if v is not None else None)
        self._rec.filled_alike(len(self._ranks), tensors)
        return work

    def allgather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        own = to_value(inputs[0])
        work, got = self._coll("all_gather", inputs, own, outputs[0])
        if got is not None and own is not None:
            for m, out in enumerate(outputs[0]):
                v = self._part(got, m, own, out)
                if v is not None:
                    _copy(out, from_value(v))
        self._rec.filled_alike(len(self._ranks), outputs[0])
        return work

    def _allgather_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> RecordedWork:
        own = to_value(input)
        work, got = self._coll("all_gather", [input], own, [output])
        if got is not None and own is not None:
            parts = [self._part(got, m, own, output) for m in range(len(self._ranks))]
            _copy_parts(output, parts, output.chunk(len(self._ranks)))
        self._rec.filled_alike(len(self._ranks), (output,))
        return work

    def _each_pair(self, op: Any, outputs: list, inputs: list, opts: Any) -> RecordedWork:
        """A coalesced call: the single-tensor op per (output, input) pair, in order."""
        work = None
        for o, i in zip(outputs, inputs, strict=False):
            work = op(o, i, opts)
        return work or self._work(None, [])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        return self._each_pair(self._allgather_base, outputs, inputs, opts)

    def gather(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        root = opts.rootRank
        own = to_value(inputs[0])
        result = outputs[0] if root == self._me and outputs else []
        work, got = self._coll("gather", inputs, own, result, root=self._ranks[root])
        if got is not None and own is not None:
            for m, out in enumerate(result):
                v = self._part(got, m, own, out)
                if v is not None:
                    _copy(out, from_value(v))
        return work

    def scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> RecordedWork:
        root = opts.rootRank
        mine = root == self._me
        vals = tuple(to_value(t) for t in inputs[0]) if mine and inputs else None
        work, got = self._coll(
            "scatter", outputs, vals, [] if mine else outputs, root=self._ranks[root]
        )
        if mine and inputs:
            _copy(outputs[0], inputs[0][self._me])
        else:
            src = self._from(got, root, None)
            if src is not None and src[self._me] is not None:
                _copy(outputs[0], from_value(src[self._me]))
        return work

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> RecordedWork:
        red = self._reduce_name(opts)
        root = opts.rootRank
        own = to_value(tensors[0])
        result = tensors if root == self._me else []
        work, got = self._coll(
            "reduce", tensors, own, result, root=self._ranks[root], reduce_op=red
        )
        if got is not None and own is not None:
            parts = [self._part(got, m, own, tensors[0]) for m in range(len(self._ranks))]
            if all(v is not None for v in parts):
                parts = [from_value(v) for v in parts]
                _copy(tensors[0], _reduce(parts, red, self._factor(opts)))
        return work

    def _reduce_scatter_base(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> RecordedWork:
        red = self._reduce_name(opts)
        own = to_value(input)
        work, got = self._coll("reduce_scatter", [input], own, [output], reduce_op=red)
        if got is not None and own is not None:
            n = len(self._ranks)
            parts = [self._part(got, m, own, output) for m in range(n)]
            if all(v is not None for v in parts):
                parts = [from_value(v).chunk(n)[self._me] for v in parts]
                _copy(output, _reduce(parts, red, self._factor(opts)))
        return work

    def reduce_scatter(
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> RecordedWork:
        red = self._reduce_name(opts)
        own = tuple(to_value(t) for t in inputs[0])
        work, got = self._coll("reduce_scatter", inputs[0][:1], own, outputs, reduce_op=red)
        if got is not None and own[self._me] is not None:
            parts = []
            fake = isinstance(outputs[0], _FakeTensor)
            for m in range(len(self._ranks)):
                v = self._part(got, m, own, outputs[0])
                if v is not None and v[self._me] is None and not fake:
                    v = own
                if v is None or v[self._me] is None:
                    break
                parts.append(from_value(v[self._me]))
            if len(parts) == len(self._ranks):
                _copy(outputs[0], _reduce(parts, red, self._factor(opts)))
        return work

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        return self._each_pair(self._reduce_scatter_base, outputs, inputs, opts)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> RecordedWork:
        n = len(self._ranks)
        extra: dict[str, Any] | None = None
        in_rows = list(input_split_sizes) or _even_rows(input, n)
        out_rows = list(output_split_sizes) or _even_rows(output, n)
        row = _row(input)
        if row is not None and all(type(r) is int for r in (*in_rows, *out_rows)):
            extra = {
                "in_splits": [r * row for r in in_rows],
                "out_splits": [r * row for r in out_rows],
            }
        # else: a data-dependent size (tokens picked by `nonzero`): the splits are not known
        own = to_value(input)
        rows = tuple(in_rows) if extra else ()
        work, got = self._coll("all_to_all", [input], (own, rows), [output], extra=extra)
        if got is not None and own is not None:
            pieces = []
            for m in range(n):
                v, sent = (own, rows) if m == self._me else self._from(got, m, (None, ()))
                known = v is not None and len(sent) == n
                pieces.append(from_value(v).split(list(sent))[self._me] if known else None)
            _copy_parts(output, pieces, output.split(out_rows))
        return work

    def alltoall(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> RecordedWork:
        own = tuple(to_value(t) for t in inputs)
        extra = (
            {
                "in_splits": [t.numel() for t in inputs],
                "out_splits": [t.numel() for t in outputs],
            }
            if all(sized(t) for t in (*inputs, *outputs))
            else None
        )
        work, got = self._coll("all_to_all", inputs[:1], own, outputs, extra=extra)
        if got is not None:
            for m, out in enumerate(outputs):
                v = own if m == self._me else self._from(got, m, None)
                if v is not None and v[self._me] is not None:
                    _copy(out, from_value(v[self._me]))
        return work

    # torch 2.13 names for the single-tensor collectives
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def barrier(self, opts: Any = None) -> RecordedWork:
        key = self._next("barrier")
        handle = self._rec.record("barrier", self._name, [], frames=_frames(2))
        self._side_effects(key)
        return self._work(handle, [])

    def _side_effects(self, key: Key) -> None:
        """A barrier orders side effects: what a member wrote before it is there for every
        member after it ("main process first": rank 0 writes a cache, the others wait, then
        all read it). Each rank runs alone, so the files written before the barrier are its
        contribution, and a member runs again once another member's files appear."""
        if self._rec.from_cpp:
            return
        mine = self._rec.take_written()
        self._rec.contribute(key, mine)
        by_path: dict[str, dict[int, bytes]] = {}
        received = self._rec.receive(key, self._ranks)
        for r, contribution in [(self._me, mine), *received.items()]:
            for path, content in getattr(contribution, "files", ()):
                if content is not None:
                    by_path.setdefault(path, {})[r] = content
        rec = self._rec
        for contribution in received.values():
            for path in getattr(contribution, "removed", ()):
                if path not in by_path:  # removed by one member, written by none
                    rec.private.pop(path, None)
                    rec.delivered.pop(path, None)
                    rec.dirs.discard(path)
                    rec.gone.add(path)
            for path in getattr(contribution, "made", ()):
                rec.dirs.add(path)
                rec.gone.discard(path)
        for path, versions in by_path.items():
            if set(versions) == {self._me}:
                continue  # only this rank wrote it: its own copy is what it sees
            rec.delivered[path] = merge_writes([versions[r] for r in sorted(versions)])
            rec.private.pop(path, None)  # the next write starts from what all wrote
            rec.gone.discard(path)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """gloo's monitored barrier: every member meets the group's first rank (send to it,
        then wait for its answer), which raises naming the ranks that did not arrive in time
        (all of them with `wait_all_ranks`) — a barrier on the group that fails instead of
        hanging. It is recorded as a barrier: a member that never arrives strands the others
        (CL2xx), as it makes them raise in a real run."""
        key = self._next("barrier")
        self._rec.emit(
            {"op": "barrier", "group": self._name, "label": "monitored_barrier"}, _frames(2)
        )
        self._rec.from_cpp = False
        self._side_effects(key)

    # point to point
    def _channel(self, src: int, dst: int, tag: int) -> Key:
        chan = (self._name, src, dst, tag)
        n = self._rec.p2p_seq.get(chan, 0)
        self._rec.p2p_seq[chan] = n + 1
        return ("p", *chan, n)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> RecordedWork:
        peer = self._ranks[dst]
        handle = self._rec.record(
            "send", self._name, tensors, peer=peer, tag=tag, frames=_frames(2)
        )
        key = self._channel(self._rec.rank, peer, tag)
        self._rec.contribute(key, to_value(tensors[0]))
        # That this message exists, whatever its value (a fake tensor has none): a receive
        # from any source pairs with it.
        self._rec.contribute(("s", *key[1:]), True)
        return self._work(handle, tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> RecordedWork:
        return self._recv_from(tensors, src, tag, None, _frames(2))

    def _recv_from(
        self, tensors: list[torch.Tensor], src: int, tag: int, extra: Any, frames: list[Any]
    ) -> RecordedWork:
        peer = self._ranks[src]
        handle = self._rec.record(
            "recv", self._name, tensors, peer=peer, tag=tag, extra=extra, frames=frames
        )
        key = self._channel(peer, self._rec.rank, tag)
        forget(tensors[0])  # a fake buffer knows only what arrives in it
        if _receivable(tensors[0]):
            v = self._rec.receive(key, [peer]).get(peer)
            if v is not None:
                _copy(tensors[0], from_value(v))
        work = self._work(handle, tensors)
        work._source = src
        return work

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> RecordedWork:
        """`recv(src=None)`: gloo pairs it with a pending send to this rank with this tag —
        the first one announced, or the first to arrive. The trace names one peer per receive,
        so the receive is recorded from the sender it pairs with: the member whose next
        message to this rank (with this tag) exists, known from the previous pass. When
        several have one, the real pairing depends on timing and the lowest rank is followed;
        when none has, the receive blocks forever and is recorded from the lowest other
        member, which never sends it (the checker reports the hang). A note in the trace's
        `meta.assumes` says which."""
        me = self._rec.rank
        senders, others = [], []
        for m, peer in enumerate(self._ranks):
            if peer == me:
                continue
            others.append(m)
            n = self._rec.p2p_seq.get((self._name, peer, me, tag), 0)
            if peer in self._rec.receive(("s", self._name, peer, me, tag, n)):
                senders.append(m)
        frames = _frames(2)
        if len(senders) != 1 and others:
            site, _ = user_site(frames)
            where = f"recv from any source at {site or 'a torch call'}"
            if senders:
                choices = ", ".join(str(self._ranks[m]) for m in senders)
                note = (
                    f"{where} could pair with ranks {choices} (whichever sends first); the "
                    f"dry-run followed rank {self._ranks[senders[0]]}"
                )
            else:
                note = (
                    f"{where}: no rank sends rank {me} a message it could pair with (tag "
                    f"{tag}); recorded as a receive from rank {self._ranks[others[0]]}"
                )
            self._rec.send(("assume", note))
        src = senders[0] if senders else others[0] if others else self._me
        return self._recv_from(tensors, src, tag, {"label": "recv from any source"}, frames)


def make_backend(recorder: Recorder) -> Callable:
    def create(opts: Any, backend_opts: Any = None) -> RecordingProcessGroup:
        ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
        return RecordingProcessGroup(recorder, opts.group_rank, ranks, str(opts.group_id))

    return create


_FUNCTIONAL = {
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all_single": "all_to_all",
    "broadcast": "broadcast",
    "broadcast_": "broadcast",
}


def _fake_or_meta(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and (x.is_meta or type(x).__name__ == "FakeTensor")


_FUNCTIONAL_NAMESPACES = frozenset({"_c10d_functional", "_c10d_functional_autograd"})
_FakeTensor = _fake_tensor.FakeTensor
_CPU = torch.device("cpu")
_META_HANDLERS = _fake_tensor._DISPATCH_META_HANDLERS
_HANDLE_DIRECTLY = _fake_tensor._DISPATCH_HANDLE_DIRECTLY
_has_subclass = _fake_tensor._check_for_subclass
_STRIDED = torch.strided
_RECORD_STREAM = torch.ops.aten.record_stream.default
# Arguments a cache key holds as they are (with their type: 1 and 1.0 hash alike)
_KEYED_BY_VALUE = frozenset(
    {int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout}
    | {torch.memory_format}
)


class _kernel_invocation:
    """torch's `in_kernel_invocation_manager` (fake tensors computing on meta tensors) as a
    plain context manager: it is entered on every cache hit."""

    __slots__ = ("guards", "mode", "prev")

    def __init__(self, mode: FakeTensorMode):
        self.mode = mode

    def __enter__(self) -> None:
        self.prev = self.mode.in_kernel_invocation
        self.guards = (torch._C._DisableTorchDispatch(), torch._C._PreserveDispatchKeyGuard())
        for guard in self.guards:
            guard.__enter__()
        self.mode.in_kernel_invocation = True
        torch._C._set_meta_in_tls_dispatch_include(True)

    def __exit__(self, *exc: Any) -> None:
        self.mode.in_kernel_invocation = self.prev
        for guard in reversed(self.guards):
            guard.__exit__(*exc)


class RecordingFakeTensorMode(_Shared, FakeTensorMode):
    """Fake tensors that also record `_c10d_functional` collectives and `wait_tensor`.

    Functional collectives on fake tensors never reach a process group, so they are recorded
    here, at dispatch. Recording inside the fake mode itself rather than in a second dispatch
    mode above it saves a Python dispatch layer on every operation (~15 % of a rank). Only
    the operations that reach the mode from outside are recorded — not those it dispatches to
    itself while computing one (decompositions) — exactly what a mode above it would see.
    """

    # Higher-order operators (FlexAttention, cond, ...) find their fake-tensor rule under
    # FakeTensorMode's own class, not a subclass's: `__torch_dispatch__` hands them to
    # FakeTensorMode's.
    supports_higher_order_operators = True

    def validate_and_convert_non_fake_tensors(self, func, converter, flat_args, args_spec):
        """Real inputs become fake ones (torch's rule); a small real one (a count from the
        data, a 0-dim scalar) becomes a fake tensor that knows its value — itself."""
        flat_args = [
            # a view (`idx.view(-1)`) is converted from a copy: torch asserts that a constant's
            # base is a constant too
            converter.from_real_tensor(self, a.clone() if a._is_view() else a, make_constant=True)
            if type(a) is torch.Tensor and a.device.type == "cpu" and a.numel() <= SMALL_REAL
            else a
            for a in flat_args
        ]
        return super().validate_and_convert_non_fake_tensors(func, converter, flat_args, args_spec)

    def may_turn_const(self, t: torch.Tensor) -> bool:
        """An output computed from known values keeps its value: small, or the program's
        bookkeeping (`bookkeeping.py`)."""
        return super().may_turn_const(t) or (
            bookkeeping.fits(t) and t.layout == torch.strided and t.device.type == "cpu"
        )

    def _prep_args_for_hash(self, result, args, state, id_hashed_objects):
        """FakeTensorMode's cache key of the arguments, built for the usual case without its
        layers: a fake tensor of this mode with concrete sizes in strided layout is keyed by
        one tuple of what torch's `TensorMetadata` holds — less the memory format, which its
        sizes and strides decide —, numbers and names by type and value, lists, tuples and
        dicts element by element. Anything else (symbolic sizes, constants, sparse tensors,
        subgraphs) is keyed by torch's own rule, which also raises where the cache must be
        bypassed. Half the cost of a
        cache hit on a Llama-shaped step was torch's key (bench/dryrun.py)."""
        if type(args) is dict:
            result.append(dict)
            result.append(len(args))
            self._prep_args_for_hash(result, tuple(args), state, id_hashed_objects)
            self._prep_args_for_hash(result, tuple(args.values()), state, id_hashed_objects)
            return None
        if type(args) is not list and type(args) is not tuple:
            return super()._prep_args_for_hash(result, args, state, id_hashed_objects)
        result.append(type(args))
        result.append(len(args))
        for arg in args:
            kind = type(arg)
            if kind is _FakeTensor:
                if (
                    arg.fake_mode is self
                    and arg.constant is None
                    and arg.layout is _STRIDED
                    and not arg._has_symbolic_sizes_strides
                ):
                    result.append(
                        (
                            arg.dtype,
                            arg.shape,
                            arg.stride(),
                            arg.fake_device,
                            arg.storage_offset(),
                            arg.untyped_storage().nbytes(),
                            arg.requires_grad,
                            arg.is_quantized,
                            arg.is_conj(),
                            arg.is_neg(),
                            arg.is_inference(),
                        )
                    )
                    continue
            elif kind in _KEYED_BY_VALUE:
                result.append(kind)
                result.append(arg)
                continue
            elif kind is list or kind is tuple:
                self._prep_args_for_hash(result, arg, state, id_hashed_objects)
                continue
            super()._prep_args_for_hash(result, (arg,), state, id_hashed_objects)
        return None

    def _get_output_tensor_from_cache_entry(self, state, entry, key, func, args):
        """A cache hit's output, made without torch's layers when its sizes are concrete (no
        symbolic size to resolve, so no guard to suppress): an empty meta tensor of the
        cached metadata, on the input's storage for a view, wrapped as a fake tensor."""
        md = entry.metadata
        if (
            md is None
            or entry.inplace_idx is not None
            or md.layout is not _STRIDED
            or type(md.storage_offset) is not int
            or not all(type(v) is int for v in md.shape)
            or not all(type(v) is int for v in md.stride)
        ):
            return super()._get_output_tensor_from_cache_entry(state, entry, key, func, args)
        with _kernel_invocation(self):
            empty = torch.empty_strided(
                md.shape,
                md.stride,
                dtype=md.dtype,
                layout=md.layout,
                device="meta",
                requires_grad=md.requires_grad,
            )
            if md.is_conj:
                torch._C._set_conj(empty, True)
            if md.is_neg:
                torch._C._set_neg(empty, True)
            if isinstance(func, torch._ops.OpOverload) and func.is_view:
                storage = args[entry.view_idx].untyped_storage()
                empty.set_(storage, md.storage_offset, md.shape, md.stride)
        return _FakeTensor(self, empty, md.device)

    def __init__(self, recorder: Recorder, **kwargs: Any):
        super().__init__(**kwargs)
        self.rec = recorder
        self._assumed_backward_read = False
        self._assumed_finite: set[str | None] = set()
        self._depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not fingerprint.enabled() or self._depth or func in _META_HANDLERS:
            return self._dispatch(func, types, args, kwargs)
        out = self._dispatch(func, types, args, kwargs)
        if out is not NotImplemented and isinstance(func, torch._ops.OpOverload):
            fingerprint.after_op(func, args, kwargs, out)
        return out

    def _dispatch(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        device = kwargs.get("device")
        if device is not None and getattr(device, "type", None) == "cuda":
            # a GPU buffer made where the torch-function layer does not reach (a gradient
            # hook, a custom backward): on the CPU, as every tensor of the program
            kwargs = {**kwargs, "device": _CPU}
        if func is _RECORD_STREAM:
            # `t.record_stream(stream)` in a gradient hook (DeepSpeed ZeRO-3), where the
            # torch-function layer does not reach: no GPU memory to keep alive here
            return None
        if isinstance(func, torch._ops.HigherOrderOperator):
            # FakeTensorMode runs the fake rule a HOP registered (`register_fake`)
            return FakeTensorMode.__torch_dispatch__(self, func, types, args, kwargs)
        # Two answers FakeTensorMode.dispatch gives without computing anything, given here
        # without its layers: metadata queries (`prim.device`, thousands per step, asked by
        # the autograd engine), and NotImplemented for a tensor subclass it does not know
        # (DTensor: its own dispatch runs next).
        meta = _META_HANDLERS.get(func)
        if meta is not None:
            return meta(args)
        if (
            any(not issubclass(t, _FakeTensor) for t in types)
            and func not in _HANDLE_DIRECTLY
            and _has_subclass(pytree.arg_tree_leaves(*args, **kwargs))
        ):
            return NotImplemented
        if func.namespace == "aten" and _small_real_only(args, kwargs, func):
            # only small real tensors in (a count made with torch.tensor(n), then
            # all-reduced): computed for real, so `total == 0` has a value, as in a real run
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        if func in _RANDOM_FILLS and _small_fake_cpu(args, kwargs):
            # `int(torch.empty((), dtype=torch.int64).random_().item())` (accelerate's
            # sampler seed): a small draw filled in place is drawn for real too, and the fake
            # tensor keeps the value, as a small real tensor would have it
            with unset_fake_temporarily():
                real = torch.empty(tuple(args[0].shape), dtype=args[0].dtype)
                func(real, *args[1:], **kwargs)
            out = self.dispatch(func, types, args, kwargs)
            know(args[0], real)
            return out
        if func.namespace == "aten" and func._opname in _KNOWN_FACTORIES:
            out = self.dispatch(func, types, args, kwargs)
            if _small_draw(args, kwargs, out):
                # the value is drawn as a real run draws it (same generator, same state): a
                # rank's data probe `if float(torch.rand(1, generator=g)) > p` is decided as
                # it is on the GPUs, with no real compute; a parameter drawn this way stays
                # fake (its value is forgotten at its first update)
                value = bookkeeping.made(func, args, kwargs, out, self.rec.send)
                if value is not None:
                    know(out, value)
            return out
        kept = _constants(args) if func.namespace == "c10d" else None
        # a functional collective of tensors that know their values would be run for real by
        # FakeTensorMode (constant propagation): through the backend, recorded twice
        hidden = _constants(args) if func.namespace in _FUNCTIONAL_NAMESPACES else []
        for t, _ in hidden:
            t.constant = None
        self._depth += 1
        try:
            # FakeTensorMode.__torch_dispatch__ is `dispatch` behind a dynamo guard and a call
            # counter; this method already has the guard (TorchDispatchMode adds it).
            out = self.dispatch(func, types, args, kwargs)
        except _DataDependent:
            if func is _SCALAR and hasattr(args[0], _IF_FINITE):
                # a NaN/inf test of a value the dry-run did not compute: the finite case
                out = getattr(args[0], _IF_FINITE)
                site, _ = user_site(_frames(2))
                if site not in self._assumed_finite:
                    self._assumed_finite.add(site)
                    self.rec.send(
                        ("assume", f"no NaN/inf in the value tested at {site} (not computed)")
                    )
                return out
            if func is not _SCALAR or not _read_by_autograd():
                raise
            # the autograd engine reads a scalar (a loss divided by a token count tensor):
            # gradients have no values here, so any number does; the program never sees it
            out = _placeholder(args[0].dtype)
            if not self._assumed_backward_read:
                self._assumed_backward_read = True
                self.rec.send(
                    (
                        "assume",
                        "a number the backward pass reads (e.g. a loss divided by a token "
                        "count) was not computed: gradients carry no values in the dry-run",
                    )
                )
        finally:
            self._depth -= 1
            for t, constant in hidden:
                t.constant = constant
        if kept:
            # FakeTensorMode forgets the value of a tensor an op writes to; a collective's
            # tensors hold what the backend delivered into that value (`_copy`): keep it, so
            # `total == 0` on an all-reduced count is still known (Lightning's
            # has_len_all_ranks) instead of forcing real tensors
            for t, constant in kept:
                if t.constant is None:
                    know(t, constant)
        if func in _HIDDEN_WRITES and len(args) > 5 and args[5]:
            # a training batch norm updates its running statistics without its schema
            # saying so: their values (and fingerprints) are the rank's own from now on
            for i in _HIDDEN_WRITES[func]:
                if i < len(args):
                    forget(args[i])
        if func in _FINITE_TESTS and not self._depth:
            _mark_finite_test(func, args, out)
        if self.rec.uniform_made and not self._depth:
            _propagate_uniform(args, out)
        if self._depth or func.namespace not in _FUNCTIONAL_NAMESPACES:
            return out
        if out is not NotImplemented:
            self._record(func, args, out)
        return out

    def _record(self, func: Any, args: Any, out: Any) -> None:
        name = func.__name__.split(".")[0]
        if name == "wait_tensor":
            constant = getattr(args[0], "constant", None)
            if constant is not None and isinstance(out, _FakeTensor) and out is not args[0]:
                know(out, constant)  # waiting gives what the collective delivered
            handle = self.rec.functional_handles.pop(id(args[0]), None)
            if handle and handle not in self.rec.functional_waited:
                self.rec.functional_waited.add(handle)
                self.rec.emit({"op": "wait", "handles": [handle]}, _frames(3))
            return
        op = _FUNCTIONAL.get(name)
        first = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]
        if op is None or not _fake_or_meta(first):
            return
        group_name = next((a for a in reversed(args) if isinstance(a, str)), None)
        group, ranks = self.rec.torch_names.get(str(group_name), ("WORLD", []))
        self.rec.seq[group] = self.rec.seq.get(group, 0) + 1
        handle = self.rec.next_handle()
        action: dict[str, Any] = {
            "op": op,
            "group": group,
            "async": True,
            "handle": handle,
            "dtype": str(first.dtype).removeprefix("torch."),
            "label": f"functional {name}",
        }
        if sized(first):
            action["shape"] = list(first.shape)
        if op in ("all_reduce", "reduce_scatter"):
            red = next((a for a in args[1:] if isinstance(a, str)), "sum")
            action["reduce_op"] = red
        if op == "broadcast" and ranks:
            action["root"] = ranks[int(args[1])]
        self.rec.emit(action, _frames(3))
        outs = out if isinstance(out, (list, tuple)) else [out]
        for o in outs:
            self.rec.functional_handles[id(o)] = handle
        if op == "all_reduce" and ranks and isinstance(out, _FakeTensor):
            self._deliver_sum(group, ranks, first, out, action.get("reduce_op", "sum"))
        if op in _UNIFORM_OPS:
            self.rec.filled_alike(len(ranks), outs)

    def _deliver_sum(self, group: str, ranks: list[int], tensor: Any, out: Any, red: str) -> None:
        """A functional all_reduce delivers values as the backend's does (same key, same
        contribution): a token count or a metric summed with `funcol.all_reduce` is known
        on every rank when every member's is."""
        key = ("c", group, self.rec.seq[group] - 1, "all_reduce")
        own = to_value(tensor)
        self.rec.contribute(key, (own,))
        if own is None or not _receivable(out):
            return
        got = self.rec.receive(key, ranks)
        parts = []
        for m in ranks:
            v = (own,) if m == self.rec.rank else got.get(m)
            if v is None or v[0] is None:
                return
            parts.append(from_value(v[0]))
        _copy(out, _reduce(parts, red))
