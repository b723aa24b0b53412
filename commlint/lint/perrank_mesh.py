"""Device meshes and DTensors in the per-rank interpreter (`perrank.Rank`).

`init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))` lays the world's ranks out
row-major over the shape (torch's `arange(world).view(shape)`): rank r sits at coordinate
`(r // stride_i) % size_i` in dimension i, where stride_i is the product of the sizes after
i. Each dimension's groups are the ranks that share every other coordinate; torch creates
every group of every dimension on every rank, alike, so the evaluator registers them all.
A sub-mesh (`mesh["tp"]`, `mesh["dp", "tp"]`) is the same layout seen along some dimensions
from this rank; its `get_local_rank()` / `get_coordinate()` are this rank's coordinates
there and `get_group()` this rank's group of that dimension.

A DTensor (`distribute_tensor(t, mesh["tp"], [Shard(0)])`, `DTensor.from_local`) remembers
its mesh and placements; `full_tensor()` and `redistribute()` all-gather on the group of each
mesh dimension whose placement changes from a non-replicated one (placements not written
out: sharded on a one-dimensional mesh, unknown — the world size abandoned — on more). So a
condition on the dp coordinate around a tp-mesh `full_tensor()` is taken alike by every
member of each tp group (no finding), while one on the tp coordinate leaves a member out.

A mesh whose shape does not multiply to the world size is a program written for another
world size: that size is not judged.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from commlint.lint.perrank_model import OTHER_WORLD, UNK, Abort, Group, Tensor, _arg

DTENSOR = "torch.distributed.tensor.DTensor"
DTENSOR_METHODS = {"full_tensor": "full_tensor (DTensor)", "redistribute": "redistribute (DTensor)"}


@dataclass(frozen=True)
class MeshView:
    """A device mesh of `shape` over the whole world (row-major), seen along `dims`."""

    shape: tuple[int, ...]
    names: tuple[str, ...] | None
    dims: tuple[int, ...]
    group: Group | None = None  # `DeviceMesh.from_group(g)`: one dimension, this rank's g

    def dim_index(self, key: object) -> int | None:
        """The root dimension a `mesh_dim` argument names (a name, or an index in the view)."""
        if key is None:
            return self.dims[0] if len(self.dims) == 1 else None
        if isinstance(key, str) and self.names and key in self.names:
            d = self.names.index(key)
            return d if d in self.dims else None
        if isinstance(key, int) and not isinstance(key, bool) and -len(self.dims) <= key:
            return self.dims[key] if key < len(self.dims) else None
        return None

    def label(self, d: int) -> str:
        return self.names[d] if self.names else str(d)


PLACEMENTS = ("Shard", "Replicate", "Partial")


@dataclass(frozen=True)
class Placement:
    kind: str  # Shard | Replicate | Partial


@dataclass
class DTensorVal:
    """A DTensor, the mesh it lives on, and its placement per mesh dimension (None: not
    known; a one-dimensional mesh is then taken as sharded)."""

    mesh: MeshView | None  # None: the default mesh, every rank in one dimension
    placements: tuple[str, ...] | None = None


@dataclass
class MeshMethod:
    target: MeshView | DTensorVal
    attr: str


def coordinates(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    out = []
    for i, size in enumerate(shape):
        stride = math.prod(shape[i + 1 :])
        out.append((rank // stride) % size)
    return tuple(out)


class Meshes:
    """`Rank`'s device meshes and DTensors."""

    def init_mesh(self, args: list, kwargs: dict, e: ast.Call) -> MeshView:
        shape = _arg(args, kwargs, 1, "mesh_shape")
        names = kwargs.get("mesh_dim_names")
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        if not isinstance(shape, tuple | list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape
        ):
            raise Abort("a device mesh whose shape this rank cannot know", e.lineno)
        if names is not None and (
            not isinstance(names, tuple | list)
            or len(names) != len(shape)
            or not all(isinstance(n, str) for n in names)
        ):
            raise Abort("a device mesh whose dimension names this rank cannot know", e.lineno)
        if math.prod(shape) != self.world:
            raise Abort(f"{OTHER_WORLD} {self.world}", e.lineno)
        mesh = MeshView(tuple(shape), tuple(names) if names else None, tuple(range(len(shape))))
        for d in mesh.dims:  # every rank creates every group of every dimension, alike
            for r in range(self.world):
                self._mesh_group(mesh, d, r)
        return mesh

    def mesh_from_group(self, args: list, kwargs: dict, e: ast.Call) -> MeshView:
        """`DeviceMesh.from_group(group, "cpu")`: a one-dimensional mesh over this rank's group
        (each rank passes its own, so the mesh is seen from inside, as a group is)."""
        g = _arg(args, kwargs, 0, "group")
        names = kwargs.get("mesh_dim_names")
        if isinstance(g, list | tuple) and len(g) == 1:
            g = g[0]
        if not isinstance(g, Group) or self.rank not in g.members:
            raise Abort("a device mesh over a group this rank cannot know", e.lineno)
        if names is not None and not (
            isinstance(names, tuple | list) and len(names) == 1 and isinstance(names[0], str)
        ):
            raise Abort("a device mesh whose dimension names this rank cannot know", e.lineno)
        return MeshView((len(g.members),), tuple(names) if names else None, (0,), g)

    def _mesh_group(self, mesh: MeshView, d: int, rank: int) -> Group:
        if mesh.group is not None:
            return mesh.group
        mine = coordinates(mesh.shape, rank)
        members = tuple(
            r
            for r in range(self.world)
            if all(c == mine[i] for i, c in enumerate(coordinates(mesh.shape, r)) if i != d)
        )
        name = f"mesh.{mesh.label(d)}{list(members)}".replace(" ", "")
        if len(members) == self.world:
            return Group("WORLD", members)
        if not any(g.name == name for g in self.groups):
            self.groups.append(Group(name, members))
        return Group(name, members)

    def mesh_group_of(self, mesh: object, line: int) -> Group | None:
        """This rank's group of a one-dimensional mesh (FSDP's `mesh=`), else None."""
        if isinstance(mesh, MeshView) and len(mesh.dims) == 1:
            return self._mesh_group(mesh, mesh.dims[0], self.rank)
        return None

    def submesh(self, mesh: MeshView, key: object, line: int) -> MeshView:
        keys = list(key) if isinstance(key, tuple | list) else [key]
        flat = self._flat_view(mesh, keys[0]) if len(keys) == 1 else None
        if flat is not None:
            return flat
        dims = []
        for k in keys:
            if not isinstance(k, str) or not mesh.names or k not in mesh.names:
                raise Abort("a mesh dimension this rank cannot know", line)
            dims.append(mesh.names.index(k))
        return MeshView(mesh.shape, mesh.names, tuple(dims))

    def mesh_attribute(self, mesh: MeshView, attr: str) -> object:
        if attr == "shape":
            return tuple(mesh.shape[d] for d in mesh.dims)
        if attr == "ndim":
            return len(mesh.dims)
        if attr == "mesh_dim_names":
            return tuple(mesh.names[d] for d in mesh.dims) if mesh.names else None
        if attr == "device_type":
            return "cpu"
        return MeshMethod(mesh, attr)

    def make_dtensor(self, args: list, kwargs: dict, line: int) -> DTensorVal:
        mesh = _arg(args, kwargs, 1, "device_mesh")
        if mesh is not None and not isinstance(mesh, MeshView):
            raise Abort("a DTensor whose mesh this rank cannot know", line)
        return DTensorVal(mesh, _placements(_arg(args, kwargs, 2, "placements"), mesh))

    def dtensor_groups(self, mesh: MeshView | None, dims: list[int]) -> list[Group]:
        if mesh is None:
            return [Group("WORLD", tuple(range(self.world)))]
        return [self._mesh_group(mesh, d, self.rank) for d in dims]

    def mesh_call(self, m: MeshMethod, args: list, kwargs: dict, e: ast.Call) -> object:
        target = m.target
        if isinstance(target, DTensorVal):
            label = DTENSOR_METHODS.get(m.attr)
            if label is None:
                return UNK  # to_local(), placements, arithmetic: nothing communicates
            mesh = target.mesh
            dims = list(mesh.dims) if mesh is not None else [0]
            new = ("Replicate",) * len(dims)
            if m.attr == "redistribute":
                new = _placements(_arg(args, kwargs, 1, "placements"), mesh)
                other = _arg(args, kwargs, 0, "device_mesh")
                if other is not None and other != mesh:
                    raise Abort("a DTensor redistributed to another mesh", e.lineno)
            old = target.placements
            if (old is None or new is None) and len(dims) > 1:
                raise Abort("a DTensor whose placements this rank cannot know", e.lineno)
            moved = [
                k
                for k in range(len(dims))
                if old is None or new is None or (old[k] != new[k] and old[k] != "Replicate")
            ]
            for g in self.dtensor_groups(mesh, [dims[k] for k in moved]):
                self.record_on("all_gather", label, g, e.lineno)
            # a full tensor (a chained `.sum()` starts where the call does: not opaque)
            return DTensorVal(mesh, new) if m.attr == "redistribute" else Tensor(None, None)
        mesh = target
        if mesh.group is not None:
            mine = (mesh.group.members.index(self.rank),)
        else:
            mine = coordinates(mesh.shape, self.rank)
        attr = m.attr
        if attr == "_flatten":
            return self.flatten(mesh, _arg(args, kwargs, 0, "mesh_dim_name"), e.lineno)
        if attr in ("get_local_rank", "get_group", "size"):
            key = _arg(args, kwargs, 0, "mesh_dim")
            flat = self._flat_view(mesh, key)
            if flat is not None:
                # `mesh.get_group("dp_cp")` on the root: the flattened dimension's own view
                return self.mesh_call(MeshMethod(flat, attr), [], {}, e)
            if attr == "size" and key is None:
                return math.prod(mesh.shape[d] for d in mesh.dims)
            d = mesh.dim_index(key)
            if d is None:
                raise Abort("a mesh dimension this rank cannot know", e.lineno)
            if attr == "get_local_rank":
                self.ev.rank_read = True
                return mine[d]
            if attr == "size":
                return mesh.shape[d]
            return self._mesh_group(mesh, d, self.rank)
        if attr == "get_coordinate":
            self.ev.rank_read = True
            return [mine[d] for d in mesh.dims]
        if attr == "get_rank":
            self.ev.rank_read = True
            return self.rank
        if attr == "get_all_groups":
            return [self._mesh_group(mesh, d, self.rank) for d in mesh.dims]
        return UNK

    def _flat_view(self, mesh: MeshView, key: object) -> MeshView | None:
        """The view `_flatten(key)` registered on this root mesh, when `key` names none of
        its own dimensions; None otherwise."""
        flat = self.flat_dims.get((mesh.shape, mesh.names), {})
        if isinstance(key, str) and key in flat and not (mesh.names and key in mesh.names):
            return flat[key]
        return None

    def flatten(self, mesh: MeshView, name: object, line: int) -> MeshView:
        """`mesh["dp", "cp"]._flatten("dp_cp")`: one dimension over the ranks those dimensions
        span (their groups merged), registered on the root mesh under its name. Row-major
        layout keeps adjacent dimensions' ranks in order when they merge, so the flattened view
        is a mesh whose shape has them multiplied into one."""
        dims = sorted(mesh.dims)
        if mesh.group is not None:
            raise Abort("a flattened mesh over a group", line)
        if dims != list(range(dims[0], dims[-1] + 1)):
            raise Abort("a mesh flattened over dimensions that are not adjacent", line)
        if name is None and mesh.names:
            name = "_".join(mesh.names[d] for d in dims)
        if not isinstance(name, str):
            raise Abort("a mesh dimension this rank cannot know", line)
        lo, hi = dims[0], dims[-1] + 1
        shape = (*mesh.shape[:lo], math.prod(mesh.shape[lo:hi]), *mesh.shape[hi:])
        names = None
        if mesh.names:
            names = (*mesh.names[:lo], name, *mesh.names[hi:])
        view = MeshView(shape, names, (lo,))
        for r in range(self.world):  # every rank creates the flattened groups, alike
            self._mesh_group(view, lo, r)
        self.flat_dims.setdefault((mesh.shape, mesh.names), {})[name] = view
        return view


def _placements(given: object, mesh: MeshView | None) -> tuple[str, ...] | None:
    """`[Shard(0), Replicate()]` as ("Shard", "Replicate"), one per mesh dimension; None
    when not known (or not one per dimension)."""
    n = len(mesh.dims) if mesh is not None else 1
    if (
        isinstance(given, list | tuple)
        and len(given) == n
        and all(isinstance(p, Placement) for p in given)
    ):
        return tuple(p.kind for p in given)
    return None
