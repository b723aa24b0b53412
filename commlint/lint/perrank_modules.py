"""Sharded modules in the per-rank interpreter (`perrank.Rank`): FSDP's `fully_shard` and
`FullyShardedDataParallel`, wherever the module goes after it was wrapped.

Real training code wraps its model in a helper (`build()` shards each block in a loop, then
the root, and returns the model) and trains it in another (`train(model, loader, opt)`). The
evaluator follows the very object: wrapping marks it (a module of the project, a
`torch.nn.Sequential` of them) or, for a module the evaluator does not model (`nn.Linear`),
returns a `Wrapped` stand-in. Calling a wrapped module (its forward) all-gathers its
parameters on the wrapper's group, once per wrapped unit reached — the root first, then each
block as the forward reaches it, as FSDP2 does; each unit's gradients are reduce-scattered on
that group by the next `.backward()`, in reverse order. A rank that skips an iteration (a
`continue` on rank 0) thus leaves the others in an all-gather, as a real run does.

Soundness: a wrapper whose group the rank cannot know (a mesh of several dimensions, an
unknown process group) abandons the world size, as any unknown group does.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from commlint.lint.perrank_mesh import MeshView
from commlint.lint.perrank_model import UNK, Abort, Group, Obj, Unknown, _argspec

MARK = "__commlint_sharded__"  # the attribute of a wrapped `Obj` that holds its `Shard`


@dataclass(frozen=True)
class Shard:
    """What wrapping made of a module: the group its parameters are sharded over."""

    group: Group
    label: str  # the wrapper's forward, as the API table names it


# FSDP2's `FSDPModule` methods a program calls on a sharded module
SHARD_METHODS = frozenset(
    {"unshard", "reshard", "set_requires_gradient_sync", "set_reshard_after_forward"}
)


@dataclass(frozen=True)
class StateDictOptions:
    """`StateDictOptions(...)` as far as communication goes (None: not known)."""

    full: bool | None


@dataclass
class ShardMethod:
    """`model.unshard()` / `model.set_requires_gradient_sync(False)` on a sharded module."""

    shard: Shard
    attr: str


@dataclass
class Wrapped:
    """A module the evaluator does not model, once wrapped: calling it communicates."""

    module: object
    shard: Shard


class Modules:
    """`Rank`'s wrapping of modules and their forward and backward communication."""

    def wrap_module(self, w: dict, args: list, kwargs: dict, e: ast.Call) -> object:
        """`fully_shard(module)`, `FSDP(module, process_group=g)`: mark the module; a
        wrapper the evaluator does not shard (DDP) stays opaque."""
        label = str(w.get("op", ""))
        if "FSDP" not in label and "tensor parallel" not in label:
            return self.opaque(e)
        target = args[int(w.get("in_place", 0))] if args else kwargs.get("module", UNK)
        shard = Shard(self._shard_group(w, args, kwargs, e), label)
        if isinstance(target, Obj):
            target.attrs[MARK] = shard
            return target
        if hasattr(target, "shard") and not isinstance(target, Unknown | Wrapped):
            target.shard = shard  # a torch.nn.Sequential of the project's modules
            return target
        wrapped = Wrapped(target, shard)
        in_place = w.get("in_place")
        node = e.args[int(in_place)] if in_place is not None and e.args else None
        if isinstance(node, ast.Name) and self.env.get(node.id) is target:
            # `fully_shard(model)` shards the module in place: the name now holds it wrapped
            self.env[node.id] = wrapped
        return wrapped

    def _shard_group(self, w: dict, args: list, kwargs: dict, e: ast.Call) -> Group:
        if "mesh" in kwargs and kwargs["mesh"] is not None:
            group = self.mesh_group_of(kwargs["mesh"], e.lineno)
            if group is None:
                raise Abort("a sharding mesh this rank cannot know", e.lineno)
            return group
        spec = w.get("group")
        given = _argspec(args, kwargs, tuple(spec)) if spec else None
        if isinstance(given, MeshView):  # `parallelize_module(m, mesh["tp"], plan)`
            group = self.mesh_group_of(given, e.lineno)
            if group is None:
                raise Abort("a parallelizing mesh this rank cannot know", e.lineno)
            return group
        return self.group_of(given, e.lineno)

    def sharded_forward(self, func: object, e: ast.Call) -> None:
        """Record the all-gather of a wrapped module's forward (and remember its backward)."""
        shard = _shard_of(func)
        if shard is None:
            return
        # tensor parallelism all-reduces (rowwise) where FSDP all-gathers its parameters
        op = "all_reduce" if "tensor parallel" in shard.label else "all_gather"
        self.record_on(op, shard.label, shard.group, e.lineno)
        pending = self.__dict__.setdefault("grad_shards", [])
        pending.append(shard)

    def shard_method(self, base: object, attr: str) -> ShardMethod | None:
        """A method of FSDP2's `FSDPModule` on a sharded module, else None."""
        shard = _shard_of(base)
        if shard is None or attr not in SHARD_METHODS:
            return None
        return ShardMethod(shard, attr)

    def shard_call(self, m: ShardMethod, args: list, kwargs: dict, e: ast.Call) -> object:
        """`unshard()` all-gathers the module's parameters on its group, whatever the caller
        does next; `set_requires_gradient_sync(False)` makes the following backwards keep
        their gradients local (no reduce-scatter) until it is set again."""
        if m.attr == "unshard":
            self.record_on("all_gather", "unshard (FSDP2 all-gather)", m.shard.group, e.lineno)
        elif m.attr == "set_requires_gradient_sync":
            flag = args[0] if args else kwargs.get("requires_gradient_sync", UNK)
            if not isinstance(flag, bool):
                raise Abort("a gradient synchronisation this rank cannot know", e.lineno, flag)
            self.__dict__["grad_sync"] = flag
        return None

    def state_dict_call(self, last: str, args: list, kwargs: dict, e: ast.Call) -> object:
        """`torch.distributed.checkpoint.state_dict`: `StateDictOptions(full_state_dict=True)`
        makes `get_model_state_dict` / `get_state_dict` of a sharded module gather every
        parameter in full (an all-gather per sharded unit, on its group); sharded options
        leave the shards where they are. None: not modelled here."""
        if last == "StateDictOptions":
            full = kwargs.get("full_state_dict", False)
            return StateDictOptions(full if isinstance(full, bool) else None)
        if last not in ("get_model_state_dict", "get_state_dict"):
            return None
        shard = _shard_of(args[0] if args else kwargs.get("model"))
        if shard is None:
            return None
        opts = kwargs.get("options")
        full = opts.full if isinstance(opts, StateDictOptions) else False if opts is None else None
        if full is None:
            raise Abort("state-dict options this rank cannot know", e.lineno)
        if full:
            self.record_on("all_gather", f"{last} (full state dict)", shard.group, e.lineno)
        return UNK

    def sharded_backward(self, e: ast.Call) -> bool:
        """`loss.backward()` after forwards of wrapped modules: each unit's reduce-scatter,
        the last forward's first. False when no wrapped forward ran since the last one."""
        pending = self.__dict__.get("grad_shards")
        if not pending:
            return False
        if self.__dict__.get("grad_sync") is False:
            pending.clear()  # gradients accumulate locally: no reduce-scatter this time
            return True
        for shard in reversed(pending):
            if "tensor parallel" in shard.label:
                self.record_on("all_reduce", "backward (tensor parallel)", shard.group, e.lineno)
            else:
                label = "backward (FSDP reduce-scatter)"
                self.record_on("reduce_scatter", label, shard.group, e.lineno)
        pending.clear()
        return True


def _shard_of(func: object) -> Shard | None:
    if isinstance(func, Wrapped):
        return func.shard
    if isinstance(func, Obj):
        got = func.attrs.get(MARK)
        return got if isinstance(got, Shard) else None
    got = getattr(func, "shard", None)
    return got if isinstance(got, Shard) else None


def calls_sharded(fn_node: ast.AST, env: dict) -> bool:
    """The function calls a module this rank has sharded (`block(x)` in a forward that loops
    over FSDP2-wrapped blocks): it communicates, though its source alone does not say so."""
    for n in ast.walk(fn_node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        v: object = None
        if isinstance(f, ast.Name):
            v = env.get(f.id)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            base = env.get(f.value.id)
            if isinstance(base, Obj):
                v = base.attrs.get(f.attr)
        if v is not None and _shard_of(v) is not None:
            return True
    return False
