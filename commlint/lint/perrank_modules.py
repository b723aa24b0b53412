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

from commlint.lint.perrank_model import UNK, Abort, Group, Obj, Unknown, _argspec

MARK = "__commlint_sharded__"  # the attribute of a wrapped `Obj` that holds its `Shard`


@dataclass(frozen=True)
class Shard:
    """What wrapping made of a module: the group its parameters are sharded over."""

    group: Group
    label: str  # the wrapper's forward, as the API table names it


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
        if "FSDP" not in label:
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
        node = (
            e.args[int(w.get("in_place", 0))] if w.get("in_place") is not None and e.args else None
        )
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
        return self.group_of(given, e.lineno)

    def sharded_forward(self, func: object, e: ast.Call) -> None:
        """Record the all-gather of a wrapped module's forward (and remember its backward)."""
        shard = _shard_of(func)
        if shard is None:
            return
        action: dict = {"op": "all_gather", "label": shard.label}
        if shard.group.name != "WORLD":
            action["group"] = shard.group.name
        self.record(action, e.lineno)
        pending = self.__dict__.setdefault("grad_shards", [])
        pending.append(shard)

    def sharded_backward(self, e: ast.Call) -> bool:
        """`loss.backward()` after forwards of wrapped modules: each unit's reduce-scatter,
        the last forward's first. False when no wrapped forward ran since the last one."""
        pending = self.__dict__.get("grad_shards")
        if not pending:
            return False
        for shard in reversed(pending):
            action: dict = {"op": "reduce_scatter", "label": "backward (FSDP reduce-scatter)"}
            if shard.group.name != "WORLD":
                action["group"] = shard.group.name
            self.record(action, e.lineno)
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
