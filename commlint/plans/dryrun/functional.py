"""The dispatch-level recorder: functional collectives (`_c10d_functional`) on fake or meta
tensors never reach a process group, so a `FakeTensorMode` records them; it also carries
values the dry-run knows through small real computations and marks what stays uniform."""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses import fake_tensor as _fake_tensor
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.utils import _pytree as pytree

from commlint.plans.dryrun import bookkeeping, fingerprint
from commlint.plans.dryrun.provenance import (
    _FINITE_TESTS,
    _HIDDEN_WRITES,
    _IF_FINITE,
    _KNOWN_FACTORIES,
    _RANDOM_FILLS,
    _SCALAR,
    _UNIFORM_OPS,
    SMALL_REAL,
    _constants,
    _copy,
    _DataDependent,
    _FakeTensor,
    _mark_finite_test,
    _placeholder,
    _propagate_uniform,
    _read_by_autograd,
    _receivable,
    _reduce,
    _small_draw,
    _small_fake_cpu,
    _small_real_only,
    forget,
    from_value,
    know,
    sized,
    to_value,
)
from commlint.plans.dryrun.recorder import Recorder, _Shared
from commlint.plans.dryrun.sites import _frames, user_site

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
