"""Fingerprints of values fake tensors do not compute: is a value the same on every rank?

Past the real re-run budget, a test of a number fake tensors did not compute is a decision
(`unread.py`): taken alike on every rank, and its other outcome explored when the number is
rank-local (CL211). A number read from a collective's result is known to be the same on every
rank; so is one computed the same way from the same inputs: the same seeds, the same data, the
same numbers — every rank seeds alike (`torch.manual_seed(0)`) and a test harness feeds every
rank one batch. (An unseeded program's ranks differ: torch seeds every process from the OS,
and the dry-run seeds each rank's default generator per rank, `child._entropy_per_rank`.)

Each fake tensor made while fingerprints are on carries a digest of how it was made: the
operation, the digests of its tensor inputs and its other arguments (numbers as they are; a
real tensor or a value the dry-run knows by its bytes; a random draw by the chain of states its
generator was seen in). A collective whose members all get one result
(all_reduce, broadcast, all_gather over every rank) gives the same digest on every rank;
any other delivery (a receive, a reduce_scatter's shard) gives none. A tensor written after
its digest was taken (in place, through any view of its storage, by communication, a batch
norm's running statistics) or made another view (`w.data = …`) has none
until an operation gives it one again. No digest means rank-local: a digest errs only
towards "rank-local", never towards "the same on every rank" (two ranks' digests agree only
when both made the value from equal inputs by the same operations).

The driver compares the digests of a decision's number across every rank (`driver._explore`):
equal everywhere, the decision is taken alike and not explored. Fingerprints cost a digest
per operation, so they are on only while decisions are made (`--real-budget` exceeded).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

_UNKNOWN = object()  # `_leaf`: an argument that may differ between ranks
_FP = "_commlint_fp"  # (digest, the storage's write count when it was taken, the view)
# Real tensors (data, a known value) larger than this are not hashed: rank-local.
CONTENT_LIMIT = 16 * 2**20

_on = False
_writes: dict[StorageWeakRef, int] = {}  # fake storages: writes seen so far
_chain: dict[int, str] = {}  # generators: the states each was seen in, as one digest
_cuda_seeds: list[str] = []  # `torch.cuda.manual_seed` calls (the stand-in keeps no state)
_alike = [0]  # collectives over every rank that gave every rank one result


_rank = [0]
# Every number read from a fake tensor so far, as one digest: a placeholder that became a
# plain number (`float(x.item())`, `math.sqrt`, numpy, `torch.tensor(x.tolist())`) is a
# number like any other from then on, so a decision counts as made alike only if every read
# before it was made alike too; a read with no fingerprint counts as the rank's own.
_reads = [""]


def enable(rank: int) -> None:
    global _on
    _on = True
    _rank[0] = rank


def read(fp: str | None) -> None:
    """A number was read from a fake tensor (`unread.py`): `fp` is how it was made."""
    if _on:
        _reads[0] = digest(_reads[0], fp if fp is not None else ("rank's own", _rank[0]))


def decision(fp: str | None) -> str | None:
    """The fingerprint a decision on a number made as `fp` is compared by across ranks."""
    return None if fp is None else digest("decision", fp, _reads[0])


def enabled() -> bool:
    return _on


def digest(*parts: Any) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=10).hexdigest()


def _view(t: torch.Tensor, key: StorageWeakRef) -> tuple:
    """Which part of which storage `t` is: `w.data = other` may change any of it."""
    return (key.cdata, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def _storage(t: torch.Tensor) -> StorageWeakRef | None:
    try:
        return StorageWeakRef(t.untyped_storage())
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _content(t: torch.Tensor) -> str | None:
    """A real tensor's digest: its dtype, shape and bytes (none past `CONTENT_LIMIT`)."""
    if t.is_sparse or t.device.type != "cpu":
        return None
    if t.numel() * t.element_size() > CONTENT_LIMIT:
        return None
    with unset_fake_temporarily(), torch.no_grad():
        flat = t.detach().contiguous().reshape(-1)
        raw = flat.view(torch.uint8) if flat.numel() else flat
        data = bytes(raw.numpy()) if raw.numel() else b""
    return digest("data", str(t.dtype), tuple(t.shape), hashlib.blake2b(data).hexdigest())


def of(t: Any) -> str | None:
    """The digest of a tensor's value; None when it may differ between ranks."""
    if isinstance(t, FakeTensor):
        stored = getattr(t, _FP, None)
        key = None if stored is None else _storage(t)
        if (
            stored is not None
            and key is not None
            and _view(t, key) == stored[2]  # not made another view (`w.data = …`)
            and _writes.get(key, 0) == stored[1]
        ):
            return stored[0]  # how it was made (a small draw: its generator's history)
        if t.constant is not None:  # a value delivered into it
            return _content(t.constant)
        return None
    if isinstance(t, torch.Tensor):
        if hasattr(t, "_local_tensor") or type(t) not in (torch.Tensor, torch.nn.Parameter):
            return None  # a DTensor or another subclass: its shard is not the whole value
        return _content(t)
    return None


def _give(t: Any, fp: str | None) -> None:
    if not isinstance(t, FakeTensor):
        return
    key = _storage(t)
    try:
        if fp is None or key is None:
            if hasattr(t, _FP):
                delattr(t, _FP)
        else:
            setattr(t, _FP, (fp, _writes.get(key, 0), _view(t, key)))
    except (AttributeError, TypeError):
        pass


def written(t: Any) -> None:
    """`t`'s storage was written: every digest taken of a tensor on it is stale."""
    if not _on or not isinstance(t, torch.Tensor):
        return
    local = getattr(t, "_local_tensor", None)  # a DTensor: its shard is what was written
    if isinstance(local, torch.Tensor):
        written(local)
        return
    key = _storage(t)
    if key is not None:
        _writes[key] = _writes.get(key, 0) + 1
    _give(t, None)


def copied(original: Any, copy: Any) -> None:
    """`copy.deepcopy(original)` (a model's layers cloned: `nn.TransformerEncoder`): the copy
    holds what the original holds, on a storage of its own."""
    if _on and isinstance(copy, FakeTensor):
        _give(copy, of(original))


def delivered_alike(tensors: Any) -> None:
    """A collective over every rank gave every rank the same result in `tensors`."""
    if not _on:
        return
    _alike[0] += 1
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor):
            written(t)
            _give(t, digest("alike", _alike[0], i))


def cuda_seeded(seed: Any) -> None:
    """`torch.cuda.manual_seed(seed)`: the stand-in draws from the CPU generator, so every
    later draw's digest includes the CUDA seeds given (a per-rank seed makes draws local); a
    state (`set_rng_state`) counts by its bytes."""
    parts = []
    for x in pytree.tree_leaves(seed):
        parts.append(_content(x) if isinstance(x, torch.Tensor) else repr(x))
    _cuda_seeds.append(digest(*parts))


def _generator_state(g: torch.Generator) -> str | None:
    """A generator's history as a draw leaves it: a chain of every state it was seen in
    (fake draws do not advance it, so the chain counts them), and the CUDA seeds the program
    gave. Two ranks agree only if their generators went through the same states in the same
    order (a rank that made one more fake draw before a small real one differs, though the
    real state would not tell)."""
    try:
        with unset_fake_temporarily():
            state = g.get_state()
    except RuntimeError:
        return None
    now = _content(state)
    if now is None:
        return None
    _chain[id(g)] = digest(_chain.get(id(g), ""), now)
    return digest("draw", _chain[id(g)], tuple(_cuda_seeds))


def _leaf(x: Any) -> Any:
    """An argument's part of an operation's digest; `_UNKNOWN` for one that may differ."""
    if isinstance(x, torch.Tensor):
        fp = of(x)
        return _UNKNOWN if fp is None else fp
    if isinstance(x, torch.Generator):
        return "generator"  # its state is in the draw's digest (`after_op`)
    fp = getattr(x, "_fingerprint", False)
    if fp is not False:  # a number read from a fake tensor (`unread.py`)
        return _UNKNOWN if fp is None else fp
    if x is None or isinstance(x, (bool, int, float, complex, str)):
        return repr(x)
    if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(x)
    return _UNKNOWN  # a data-dependent size (SymInt), an opaque object: may differ


def _parts(values: Any) -> list[Any] | None:
    """The digest parts of every leaf of `values`; None if one may differ between ranks."""
    parts = []
    for leaf in pytree.tree_leaves(values):
        part = _leaf(leaf)
        if part is _UNKNOWN:
            return None
        parts.append(part)
    return parts


def initialised(t: Any, name: str, args: tuple, kwargs: dict) -> None:
    """`torch.nn.init.<name>(t, *args)`, skipped by the dry-run (`child.py`): `t` holds what a
    real run's initialisation gives — numbers, or a draw from the generator given (else the
    default one). A DTensor's shard is the rank's own."""
    if not _on or not isinstance(t, torch.Tensor):
        return
    if not isinstance(t, FakeTensor):
        written(t)
        return
    given = _parts((args, kwargs))
    if given is None:
        written(t)
        return
    parts: list[Any] = ["init", name, tuple(t.shape), str(t.dtype), *given]
    if name not in ("constant_", "ones_", "zeros_"):
        given = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Generator)]
        parts.append(_generator_state(given[0] if given else torch.default_generator))
    written(t)
    _give(t, None if None in parts else digest(*parts))


def stepped(optimizer: Any) -> None:
    """An optimizer step, skipped by the dry-run (`child.py`): each parameter with a gradient
    holds what its value, its gradient and the optimizer's settings make it."""
    if not _on:
        return
    for group in getattr(optimizer, "param_groups", []):
        # the settings (a tensor learning rate by its own fingerprint)
        settings = _parts([(k, v) for k, v in sorted(group.items()) if k != "params"])
        for p in group.get("params", []):
            grad = getattr(p, "grad", None)
            if grad is None:
                continue
            # the optimizer's state for it (momentum, moments, step counts) counts too
            state = _parts(getattr(optimizer, "state", {}).get(p, {}))
            before, g = of(p), of(grad)
            written(p)
            if None not in (settings, state, before, g):
                _give(p, digest("step", type(optimizer).__name__, settings, before, g, state))


# Operations that overwrite their first argument whatever it held: its old value is not theirs.
_OVERWRITE = frozenset(
    {"copy_", "fill_", "zero_", "uniform_", "normal_", "random_", "bernoulli_", "exponential_",
     "cauchy_", "log_normal_", "geometric_", "set_"}
)  # fmt: skip
# Operations whose result holds whatever memory held (a real run's differs by rank).
_UNDEFINED = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
# Communication: what arrives is for the backend to say (`delivered_alike`, `written`).
_COMMUNICATION = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd")


def after_op(func: Any, args: tuple, kwargs: dict, out: Any) -> None:
    """Give the fake tensors an operation made or wrote their digest."""
    if func.namespace in _COMMUNICATION:
        return
    schema = func._schema
    given = [
        args[i] if i < len(args) else kwargs.get(arg.name) for i, arg in enumerate(schema.arguments)
    ]
    writes = [
        v for v, arg in zip(given, schema.arguments, strict=False)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]  # fmt: skip
    name = func._opname
    fp: str | None = None
    # a draw advances its generator whatever its other arguments are (a rank that drew from
    # a tensor without a fingerprint has a generator of its own from then on)
    draws = [
        _generator_state(x) for x in pytree.tree_leaves(given) if isinstance(x, torch.Generator)
    ]
    if torch.Tag.nondeterministic_seeded in func.tags and not draws:
        draws.append(_generator_state(torch.default_generator))
    if name not in _UNDEFINED and None not in draws:
        inputs = list(given)
        if inputs and name in _OVERWRITE and isinstance(inputs[0], torch.Tensor):
            inputs[0] = (tuple(inputs[0].shape), str(inputs[0].dtype))  # overwritten: shape only
        parts = _parts(inputs)
        if parts is not None:
            fp = digest(str(func), *draws, *parts)
    outs = pytree.tree_leaves(out)
    for j, w in enumerate(pytree.tree_leaves(writes)):
        if isinstance(w, torch.Tensor):
            written(w)
            if not any(w is o for o in outs):
                _give(w, None if fp is None else digest(fp, "written", j))
    for i, o in enumerate(outs):
        if isinstance(o, FakeTensor):
            # what it came out as counts too (a default dtype set per rank: `torch.full`)
            made = (i, str(o.dtype), tuple(o.shape), o.stride())
            _give(o, None if fp is None else digest(fp, *made))
