"""What fake tensors cannot do by themselves, inside one simulated rank: deep copies that keep
known values, DataLoader workers that load real data, unread numbers (`.item()`) noted once
per line, computation that never communicates skipped, chunks made lazily, checkpoints of
fake tensors, object collectives, DeviceMesh set-up and DDP's checks.

Installed by `child._install`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from commlint.plans.dryrun import fingerprint, gpu_paths, gpu_standins, provenance, sites, unread
from commlint.plans.dryrun.provenance import know
from commlint.plans.dryrun.recorder import Recorder
from commlint.plans.dryrun.sites import user_site

if TYPE_CHECKING:
    from commlint.plans.dryrun.child import RankSpec  # the spec `_unread_values` reads


def _wrap(module: Any, name: str, make: Any) -> None:
    orig = getattr(module, name, None)
    if orig is not None:
        setattr(module, name, make(orig))


def _deep_copies_keep_constants() -> None:
    """A fake tensor that knows its value (a parameter made from `torch.tensor(2.0)`) fails to
    deep-copy inside the fake mode (its real constant would be copied there too): copy the
    fake tensor without it, then give the copy a real copy of the constant."""
    from torch._subclasses.fake_tensor import FakeTensor

    orig = torch.Tensor.__deepcopy__

    def __deepcopy__(self: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
        if not isinstance(self, FakeTensor) and not self.is_meta:
            # a real tensor (torchmetrics' default state, torch.tensor(0.0)): a real copy, as
            # in a real run — copying its storage inside the fake mode fails
            with unset_fake_temporarily():
                return orig(self, memo)
        constant = getattr(self, "constant", None)
        if constant is None:
            new = orig(self, memo)
            fingerprint.copied(self, new)  # a copy holds what the original holds
            return new
        self.constant = None
        try:
            new = orig(self, memo)
        finally:
            self.constant = constant
        with unset_fake_temporarily():
            know(new, constant.clone())
        return new

    torch.Tensor.__deepcopy__ = __deepcopy__


def _real_data_loader_workers() -> None:
    """DataLoader workers are forked from the rank, inside its fake tensor mode: they load
    and collate real data (as in a real run) and hand it over through shared memory, which
    fake tensors cannot do. The rank's model still sees it as non-fake input."""
    from torch.utils.data._utils import worker

    from commlint.plans.dryrun.unread import UnreadFloat

    loop = real_tensors(worker._worker_loop)

    def worker_loop(*a: Any, **k: Any) -> Any:
        # The loader's base seed was drawn from a fake tensor: an unread number.
        a = tuple(int(float(x)) if isinstance(x, UnreadFloat) else x for x in a)
        k = {n: int(float(x)) if isinstance(x, UnreadFloat) else x for n, x in k.items()}
        return loop(*a, **k)

    worker._worker_loop = worker_loop
    from torch.utils.data import dataloader

    it_cls = dataloader._MultiProcessingDataLoaderIter
    it_cls._try_get_data = real_tensors(it_cls._try_get_data)  # unpickles shared memory
    # Samplers draw their order from torch's generator: real numbers, cheap to compute, and
    # the indices must be real to index a dataset.
    from torch.utils.data import distributed, sampler

    for cls in (sampler.RandomSampler, sampler.SubsetRandomSampler, distributed.DistributedSampler):
        cls.__iter__ = _real_iterator(cls.__iter__)


def _real_iterator(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A generator method, each step of which runs outside the fake tensor mode."""

    def __iter__(self: Any) -> Any:
        with unset_fake_temporarily():
            it = iter(orig(self))
        while True:
            with unset_fake_temporarily():
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item

    return __iter__


def _unread_values(recorder: Recorder, spec: RankSpec) -> None:
    """`.item()` / `.tolist()` of fake tensors without a value give unread numbers (see
    `unread.py`); each line that reads one is noted once in the trace's `meta.assumes`.
    With `spec.symbolic`, a comparison of one is a decision: the placeholder's outcome (or
    the other one, for a decision in `spec.flips`), sent to the driver as `decision`."""

    said: set[Any] = set()

    def assume_once(key: Any, what: str) -> None:
        if key not in said:
            said.add(key)
            recorder.send(("assume", what))

    def on_read() -> str | None:
        site, _ = user_site(sites._frames(3))
        if site:
            # Without symbolic steering a test of it would have stopped the rank (and the
            # run gone on with real tensors): what this run did with it steered nothing.
            steers = (
                ""
                if spec.symbolic
                else ": it is only printed, formatted or computed with, never steers the program"
            )
            assume_once(
                ("read", site), f"the value read at {site} was not computed (fake tensors){steers}"
            )
        return site

    counts: dict[str | None, int] = {}
    flips = set(spec.flips)

    def decide(value: Any, outcome: bool, holds: bool | None) -> bool:
        site, _ = user_site(sites._frames(2))
        if holds is not None:
            # an `assert`: the program's own check of its values, taken to pass (its other
            # outcome only raises AssertionError, which says nothing about communication)
            what = (
                f"the assertion at {site} on a value fake tensors did not compute was taken to hold"
            )
            assume_once(("test", site), what)
            return holds
        read, uniform = unread.read_at(value), unread.provenance(value)
        n = counts.get(site, 0)
        counts[site] = n + 1
        key = f"{site}#{n}"
        if key in flips:
            outcome = not outcome
        fp = fingerprint.decision(unread.fingerprint_of(value))
        recorder.send(("decision", key, read, site, outcome, uniform, fp))
        scope = "the same on every rank (a collective's result)" if uniform else "rank-local"
        what = (
            f"the test at {site} of the value read at {read or 'a fake tensor'} ({scope}, not "
            f"computed) was taken as {outcome} on every rank"
            + ("" if uniform else "; the other outcome was recorded too")
        )
        assume_once(("test", site), what)
        return outcome

    def on_assume(what: str) -> None:
        assume_once(what, f"assumed: {what}")

    if spec.symbolic:
        fingerprint.enable(spec.rank)  # is a decision's number the same on every rank? (`driver`)
    unread.install(on_read, on_assume, provenance.is_uniform, decide if spec.symbolic else None)


_NO_COMM_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam")
_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
)


_NOT_RANDOM = ("constant_", "ones_", "zeros_")


def _dtensor_rng_tracker_for(tensor: Any) -> None:
    """What a skipped random init of a DTensor on a GPU mesh does first in a real run: its
    random op makes DTensor's RNG tracker, which syncs rank 0's RNG state (a broadcast)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import _random as rng

    if not (gpu_paths.gpu_meshes and isinstance(tensor, DTensor)) or rng._rng_tracker:
        return
    if rng.is_rng_supported_mesh(tensor.device_mesh):
        rng._rng_tracker = rng.OffsetBasedRNGTracker(tensor.device_mesh)


def _skip_computation_without_communication() -> None:
    """Under fake tensors, weight initialisation and the updates of torch's own optimizers
    compute nothing anyone can see and never communicate: skip them (they dominate the cost
    of a dry-run step). The optimizer step hooks still run."""
    import torch.nn.init as init

    def keeping(name: str) -> Callable[..., Any]:
        def keep(tensor: Any, *a: Any, **k: Any) -> Any:
            if name not in _NOT_RANDOM:
                _dtensor_rng_tracker_for(tensor)
            fingerprint.initialised(tensor, name, a, k)  # what a real run's would hold
            return tensor

        return keep

    for name in _INIT_FUNCTIONS:
        if hasattr(init, name):
            setattr(init, name, keeping(name))
    for name in _NO_COMM_OPTIMIZERS:
        cls = getattr(torch.optim, name, None)
        if cls is None:
            continue

        def step(self: Any, closure: Any = None, _step: Any = cls.step) -> Any:
            rates = [g.get("lr") for g in self.param_groups]
            if not self.__dict__.get("_commlint_stepped") and all(
                type(lr) in (float, int) for lr in rates
            ):
                # the first step makes the optimizer's state (`exp_avg`, `momentum_buffer`,
                # on fake tensors), which programs read (`opt.state[p]["exp_avg"]`): it runs
                # at a learning rate of 0, so the parameters stay as every skipped step
                # leaves them (a value the dry-run knows stays the same on every rank)
                self._commlint_stepped = True
                for g in self.param_groups:
                    g["lr"] = 0.0
                try:
                    out = _step(self, closure)
                finally:
                    for g, lr in zip(self.param_groups, rates, strict=True):
                        g["lr"] = lr
            else:
                out = closure() if closure is not None else None
            fingerprint.stepped(self)  # the parameters hold what a real step makes them
            return out

        # Optimizer.__init__ wraps `step` once more so the step hooks still run.
        cls.step = step


class _LazyChunks(Sequence):
    """`torch.chunk(tensor, n, dim)` padded with empty tensors to n pieces, as FSDP2's
    `_chunk_with_empty`, but each piece made only when asked for: FSDP2 chunks every
    parameter into as many pieces as the data-parallel world and keeps one or two, which on
    fake tensors costs O(world) tensor objects per parameter on every rank (~0.8 s of a
    rank at W=64). A piece is the same view `torch.chunk` returns (a narrow of the dim)."""

    def __init__(self, tensor: torch.Tensor, num_chunks: int, dim: int):
        self._tensor, self._n, self._dim = tensor, num_chunks, dim
        size = tensor.size(dim)
        self._step = -(-size // num_chunks)  # torch.chunk: ceil(size / chunks) per piece
        self._full = -(-size // self._step)  # pieces torch.chunk returns; the rest are empty

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        if i >= self._full:
            return self[0].new_empty(0)
        start = i * self._step
        length = min(self._step, self._tensor.size(self._dim) - start)
        return self._tensor.narrow(self._dim, start, length)


def _chunk_lazily(orig: Any) -> Any:
    def chunk_with_empty(tensor: torch.Tensor, num_chunks: int, dim: int) -> Any:
        if num_chunks <= 1 or tensor.size(dim) == 0:
            return orig(tensor, num_chunks, dim)
        return _LazyChunks(tensor, num_chunks, dim)

    return chunk_with_empty


def real_tensors(orig: Callable[..., Any]) -> Callable[..., Any]:
    """`orig`, run outside the fake tensor mode (it needs values, not just shapes)."""

    def wrapper(*a: Any, **k: Any) -> Any:
        with unset_fake_temporarily():
            return orig(*a, **k)

    return wrapper


def _fake_tensors_pickle_as_meta() -> None:
    """`torch.save` (a checkpoint) and pickling of a fake tensor: its value where it knows one,
    else a meta tensor of its shape, dtype and strides (no data); `torch.load` gives it back
    as a fake tensor of that shape."""

    def reduce_ex(self: FakeTensor, proto: Any) -> Any:
        if self.constant is not None:
            return self.constant.__reduce_ex__(proto)
        meta = (self.dtype, tuple(self.size()), self.stride(), self.requires_grad)
        return torch._utils._rebuild_meta_tensor_no_storage, meta

    FakeTensor.__reduce_ex__ = reduce_ex


def _install_fake_helpers(c10d: Any) -> None:
    """What fake tensors cannot do: object collectives, DeviceMesh set-up, DDP's checks."""
    _skip_computation_without_communication()
    _fake_tensors_pickle_as_meta()
    with contextlib.suppress(ImportError):
        from torch.distributed.fsdp._fully_shard import _fsdp_param

        _wrap(_fsdp_param, "_chunk_with_empty", _chunk_lazily)
    for name in (
        "all_gather_object",
        "gather_object",
        "broadcast_object_list",
        "scatter_object_list",
        "send_object_list",
        "recv_object_list",
    ):
        for mod in (dist, c10d):
            _wrap(mod, name, real_tensors)
    with contextlib.suppress(ImportError):
        import torch.distributed.device_mesh as dm
        from torch.distributed.device_mesh import DeviceMesh

        DeviceMesh.__init__ = real_tensors(DeviceMesh.__init__)
        dm.init_device_mesh = real_tensors(dm.init_device_mesh)
    import torch.nn.parallel.distributed as ddp_mod

    verify = ddp_mod._verify_param_shape_across_processes

    def verify_shapes(pg: Any, params: Any, logger: Any = None) -> Any:
        # Same communication, from zero-stride stand-ins that cost one element each.
        with unset_fake_temporarily():
            stand_ins = [torch.zeros((), dtype=p.dtype).expand(p.shape) for p in params]
            return verify(pg, stand_ins, logger)

    ddp_mod._verify_param_shape_across_processes = verify_shapes
    reducer = torch._C._distributed_c10d.Reducer

    told = []

    def rebuild_buckets(self: Any) -> bool:
        # The rebuild copies parameter data, which fake tensors do not have: the first
        # iteration's buckets stay (an assumption noted in the trace's meta). The rebuild's
        # first step stays: DDP's check that the previous backward reduced every bucket,
        # which raises its own error for parameters that got no gradient (unused parameters
        # without find_unused_parameters=True).
        self._check_reducer_finalized()
        if not told:
            told.append(True)
            gpu_standins._RECORDER.send(
                ("assume", "DDP buckets keep the first iteration's order (no rebuild)")
            )
        return False

    reducer._rebuild_buckets = rebuild_buckets
