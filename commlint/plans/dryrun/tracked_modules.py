"""Rank classes through torch's parallel modules: where DeviceMesh, FSDP2, DTensor and
pipelining compute from the tracked rank (`tracked.py`), the values keep their expression
instead of pinning the rank.

Each of these places used to pin (the torch file and line, torch 2.13):

- `DeviceMesh._compute_coordinates_from_mesh` (`device_mesh.py:362`, `(mesh == rank).nonzero()`)
  and `_get_mesh_tensor_from_full_mesh` (`device_mesh.py:418`): a mesh made outside
  `init_device_mesh` — FSDP2's `DeviceMesh._concatenate` of its dp and tp meshes, every
  `mesh.mesh` read — compared a tensor with the rank, which pins the whole rank. Now the
  root mesh is checked once to be a grid of the world (every rank once, rank `x` at
  coordinates `(x // stride) % size`), and the coordinates are those expressions; the rank's
  slice of a sliced mesh is read with the plain rank when torch reads it (`mesh.mesh` read
  by the program itself still pins).
- `FSDPParam._init_sharded_param` (`_fsdp_param.py:299`, `chunks[shard_rank]`): the shard
  index pinned the rank's place in the dp group. Now the shard is cut with the plain index
  and the index is pinned afterwards only when the shards differ in size (a dimension not
  divisible by the group), or when the parameter holds real data (a real tensor's shard is
  data that differs per rank).
- DTensor's `Shard._maybe_unpad_tensor_with_sizes` (`placement_types.py:395`,
  `pad_sizes[mesh_dim_local_rank]`): an index into the padding of every rank's chunk. When
  every chunk has the same padding the index selects the same number for every rank, so it
  only has to be a valid index.
- Pipelining (`stage.py:198`, `:343`, `:1748`, `:2268`, `:2312`): the stage index formatted
  into the stage's log prefix and receive-buffer names (used by torch only in log lines and
  error texts), and used as a key of `stage_index_to_group_rank`, which maps stage `i` to
  `i % group_size`: that map now answers a tracked key with the expression
  `(key % group_size)` (the key in range joins the condition) instead of hashing it. A
  step's P2P ops grouped by peer in a dict (`schedules.py:669`) are grouped and sorted by
  comparing the peers instead (`_sorted_batch`).

A value these cannot express still pins, as before.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Any

from commlint.plans.dryrun import tracked
from commlint.plans.dryrun.tracked import RankValue, make


def _active() -> tracked._State | None:
    st = tracked.STATE
    return st if st is not None and not st.window else None


@functools.lru_cache(maxsize=256)
def _grid_of(shape: tuple[int, ...], flat: tuple[int, ...], world: int) -> tuple | None:
    """(stride, size) per dimension when the tensor of `shape` holding `flat` (row-major) holds
    every rank of the world once, rank `x` at coordinates `((x // stride) % size)`; else None."""
    if len(flat) != world or sorted(flat) != list(range(world)):
        return None
    strides, step = [], 1
    for n in reversed(shape):  # row-major positions
        strides.append(step)
        step *= n
    pos_stride = list(reversed(strides))
    dims = []
    for j, n in enumerate(shape):
        t = flat[pos_stride[j]] - flat[0] if n > 1 else 1
        if t <= 0:
            return None
        dims.append((t, n))
    for x in range(world):  # every rank where its coordinates say
        pos = sum(((x // t) % n) * s for (t, n), s in zip(dims, pos_stride, strict=True))
        if flat[pos] != x:
            return None
    return tuple(dims)


def grid(tensor: Any, world: int) -> tuple | None:
    """`_grid_of` for a mesh tensor (read outside fake mode)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        flat = tuple(int(x) for x in tensor.flatten().tolist())
    return _grid_of(tuple(tensor.shape), flat, world)


def _from_torch(depth: int) -> bool:
    """Whether the frame `depth` levels up is torch's own code (not the program's)."""
    f = sys._getframe(depth + 1)
    return "/torch/" in f.f_code.co_filename


def _install_mesh() -> None:
    import torch.distributed as dist
    import torch.distributed.device_mesh as dm

    cls = dm.DeviceMesh
    orig_coord = cls._compute_coordinate_on_dim
    orig_tensor = cls.__dict__["_get_mesh_tensor_from_full_mesh"].__func__

    @functools.wraps(orig_coord)
    def coordinate_on_dim(self: Any) -> Any:
        st, rank = _active(), getattr(self, "_rank", None)
        if st is None or type(rank) is not RankValue:
            return orig_coord(self)
        full = self._layout.remap_to_tensor(self._rank_map)
        dims = grid(full, st.world)
        if dims is None:
            return orig_coord(self)  # pins the rank, as before
        self._rank = rank._v
        try:
            with tracked.window():
                plain = orig_coord(self)
        finally:
            self._rank = rank
        mesh_dims = dims[full.dim() - len(plain) :] if plain is not None else ()
        out = []
        for (t, n), v in zip(mesh_dims, plain or (), strict=True):
            if (rank._v // t) % n != v:
                return orig_coord(self)
            out.append(RankValue(f"(({rank._e}//{t})%{n})", v))
        return tuple(out) if plain is not None else None

    cls._compute_coordinate_on_dim = coordinate_on_dim

    def mesh_tensor(full_mesh: Any, current_rank: Any = None) -> Any:
        st = _active()
        if st is None or full_mesh.size(0) == 1:
            return orig_tensor(full_mesh, current_rank)
        if current_rank is None:
            current_rank = dist.get_rank()
        if type(current_rank) is not RankValue:
            return orig_tensor(full_mesh, current_rank)
        # torch's own reads of the rank's slice (coordinates, sizes): the slice is the rank's
        # line of a grid; the program's own read of `mesh.mesh` pins the rank
        if not _from_torch(2) or grid(full_mesh, st.world) is None:
            return orig_tensor(full_mesh, current_rank)
        with tracked.window():
            return orig_tensor(full_mesh, current_rank._v)

    cls._get_mesh_tensor_from_full_mesh = staticmethod(mesh_tensor)


def _unobservable(t: Any) -> bool:
    """A tensor whose data nobody can read: meta, or fake (reading it stops the rank)."""
    from torch._subclasses.fake_tensor import is_fake

    return bool(getattr(t, "is_meta", False) or is_fake(t))


def _install_fsdp() -> None:
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param as fp
    except ImportError:
        return
    orig = fp.FSDPParam._init_sharded_param
    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def init_sharded_param(self: Any, *a: Any, **k: Any) -> Any:
        bound = sig.bind(self, *a, **k)
        info, param = bound.arguments.get("mesh_info"), bound.arguments.get("param")
        rank = getattr(info, "shard_mesh_rank", None)
        if _active() is None or type(rank) is not RankValue:
            return orig(self, *a, **k)
        local = getattr(param, "_local_tensor", param)
        info.shard_mesh_rank = rank._v
        try:
            out = orig(self, *a, **k)
        finally:
            info.shard_mesh_rank = rank
        d = self.fsdp_placement.dim
        even = self._orig_size[d] == self.padded_sharded_param_size[d] * info.shard_mesh_size
        if self.mesh_info is not info or not (even and _unobservable(local)):
            rank._concrete("an FSDP shard of uneven size or real data")
        return out

    fp.FSDPParam._init_sharded_param = init_sharded_param
    post = fp.FSDPParam._init_sharded_post_forward_param_metadata

    @functools.wraps(post)
    def post_forward_metadata(self: Any, param: Any) -> Any:
        # `chunks[shard_mesh_rank]` only for its size (`_fsdp_param.py:571`): the same for
        # every rank when the rows divide evenly
        info = self.post_forward_mesh_info
        rank = getattr(info, "shard_mesh_rank", None)
        local = getattr(param, "_local_tensor", param)
        if _active() is None or type(rank) is not RankValue:
            return post(self, param)
        if local.dim() == 0 or local.size(0) % info.shard_mesh_size != 0:
            return post(self, param)  # shards of different sizes: the index pins
        info.shard_mesh_rank = rank._v
        try:
            return post(self, param)
        finally:
            info.shard_mesh_rank = rank

    fp.FSDPParam._init_sharded_post_forward_param_metadata = post_forward_metadata
    _install_fsdp_copy_in()


def _install_fsdp_copy_in() -> None:
    """`torch.ops.fsdp.all_gather_copy_in(..., rank)` puts the rank's input at its place in
    the all-gather's output: the place of data only, so on tensors nobody reads the index
    need not pin (`_fsdp_collectives.py:354`)."""
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives  # registers the op

    ns = torch.ops.fsdp
    try:
        orig = ns.all_gather_copy_in
    except AttributeError:
        return

    def all_gather_copy_in(inputs: Any, output: Any, sizes: Any, numel: Any, rank: Any) -> Any:
        if _active() is not None and type(rank) is RankValue and _unobservable(output):
            rank = rank._v
        return orig(inputs, output, sizes, numel, rank)

    ns.all_gather_copy_in = all_gather_copy_in
    del _fsdp_collectives


def _uniform_index(seq: Any, index: Any) -> Any:
    """`index` as a plain number when every element of `seq` is the same (then only its being
    a valid index matters, added to the condition); a tracked index otherwise (it pins)."""
    st = _active()
    if st is None or type(index) is not RankValue:
        return index
    try:
        items = list(seq)
    except TypeError:
        return index
    if not items or any(x != items[0] for x in items):
        return index
    _in_range(st, index, len(items))
    return index._v


def _in_range(st: tracked._State, index: RankValue, n: int) -> bool:
    """Whether the tracked `index` is in `range(n)`, that or its negation joining the
    condition."""
    inside = 0 <= index._v < n
    cond = f"0 <= ({index._e}) < {n}"
    st.add(cond if inside else f"not ({cond})")
    return inside


def _install_dtensor() -> None:
    try:
        from torch.distributed.tensor.placement_types import Shard
    except ImportError:
        return
    name = "_maybe_unpad_tensor_with_sizes"
    raw = Shard.__dict__.get(name)
    if not isinstance(raw, staticmethod):
        return
    orig = raw.__func__

    @functools.wraps(orig)
    def unpad(dim: Any, local_tensor: Any, pad_sizes: Any, local_rank: Any, *a: Any) -> Any:
        return orig(dim, local_tensor, pad_sizes, _uniform_index(pad_sizes, local_rank), *a)

    setattr(Shard, name, staticmethod(unpad))


class StageMap(dict):
    """Pipelining's `stage_index_to_group_rank` ({stage: stage % group size}): a tracked
    stage index looks up `(stage % group size)` (its being a stage joins the condition)."""

    def _modulus(self) -> int | None:
        n = len(self)
        if n == 0 or set(self) != set(range(n)):
            return None
        g = max(dict.values(self)) + 1
        return g if all(dict.__getitem__(self, i) == i % g for i in range(n)) else None

    def _tracked(self, key: Any) -> tuple[bool, Any]:
        st = _active()
        if st is None or type(key) is not RankValue:
            return False, None
        g = self._modulus()
        if g is None:
            return False, None
        if not _in_range(st, key, len(self)):
            return True, KeyError(key._v)
        return True, make(f"(({key._e})%{g})", key._v % g)

    def __getitem__(self, key: Any) -> Any:
        done, value = self._tracked(key)
        if not done:
            return dict.__getitem__(self, key)
        if isinstance(value, KeyError):
            raise value
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        done, value = self._tracked(key)
        if not done:
            return dict.get(self, key, default)
        return default if isinstance(value, KeyError) else value

    def __contains__(self, key: Any) -> bool:
        done, value = self._tracked(key)
        if not done:
            return dict.__contains__(self, key)
        return not isinstance(value, KeyError)


def _install_pipelining() -> None:
    try:
        from torch.distributed.pipelining import schedules, stage
    except ImportError:
        return
    base = stage._PipelineStageBase
    orig_init = base.__init__

    @functools.wraps(orig_init)
    def init(self: Any, *a: Any, **k: Any) -> None:
        st = _active()
        # the stage's log prefix (`[Stage 3]`) goes only to log lines and error texts
        with harmless_strings() if st is not None else contextlib.nullcontext():
            orig_init(self, *a, **k)
        self.stage_index_to_group_rank = StageMap(self.stage_index_to_group_rank)

    base.__init__ = init
    # the names of a stage's receive buffers (`recv_for_3_from_2`) go only to error texts
    for cls in (stage.PipelineStage, getattr(stage, "_PipelineStage", None)):
        for name in ("_setup_forward_recv_info", "_create_grad_recv_info", "_create_act_recv_info"):
            method = cls.__dict__.get(name) if cls is not None else None
            if method is not None:
                setattr(cls, name, _logging_strings(method))
    orig_sorted = getattr(schedules, "_sorted_batch_p2p", None)
    if orig_sorted is not None:
        schedules._sorted_batch_p2p = _sorted_batch(orig_sorted, schedules._batch_p2p)
    orig_map = getattr(schedules, "generate_stage_to_rank_mapping", None)
    if orig_map is not None:

        @functools.wraps(orig_map)
        def mapping(*a: Any, **k: Any) -> Any:
            out = orig_map(*a, **k)
            return StageMap(out) if type(out) is dict else out

        schedules.generate_stage_to_rank_mapping = mapping


def _logging_strings(method: Any) -> Any:
    @functools.wraps(method)
    def run(*a: Any, **k: Any) -> Any:
        if _active() is None:
            return method(*a, **k)
        with harmless_strings():
            return method(*a, **k)

    return run


def _sorted_batch(orig: Any, batch: Any) -> Any:
    """`_sorted_batch_p2p` groups a step's P2P ops by peer in a dict (a hash of the peer, which
    pins it) and runs each peer's ops in the peers' order. Grouped by comparing the peers and
    sorted by comparing them instead (each comparison joins the condition); the result is
    keyed by the group's place, which its callers never read (they take `.values()`)."""

    @functools.wraps(orig)
    def sorted_batch_p2p(p2p_ops: Any, desc: Any = None) -> Any:
        if _active() is None or not any(type(op.peer) is RankValue for op in p2p_ops):
            return orig(p2p_ops, desc=desc)
        groups: list[tuple[Any, list[Any]]] = []
        for op in p2p_ops:
            for peer, ops in groups:
                if peer == op.peer:
                    ops.append(op)
                    break
            else:
                groups.append((op.peer, [op]))

        def order(a: tuple, b: tuple) -> int:
            return -1 if a[0] < b[0] else 1 if b[0] < a[0] else 0

        groups.sort(key=functools.cmp_to_key(order))
        return {i: batch(ops, desc=desc) for i, (_, ops) in enumerate(groups)}

    return sorted_batch_p2p


@contextlib.contextmanager
def harmless_strings() -> Any:
    """Strings made from tracked values here go to logs only: they do not pin."""
    st = tracked.STATE
    assert st is not None
    st.harmless += 1
    try:
        yield
    finally:
        st.harmless -= 1


def install() -> None:
    """Carry the rank through DeviceMesh, FSDP2, DTensor and pipelining (see the module)."""
    _install_mesh()
    _install_fsdp()
    _install_dtensor()
    _install_pipelining()


__all__: list[str] = ["StageMap", "grid", "harmless_strings", "install"]
