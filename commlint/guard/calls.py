"""Which `torch.distributed` functions the guard wraps, and how a call becomes an action.

One table (`API`) says, per function, the trace op it is, where its tensor, root, peer and
reduce op are, and whether it is point-to-point; `describe` reads a call's arguments with the
function's own signature, so positional and keyword forms read the same.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallSpec:
    """How to read one `torch.distributed` function's arguments."""

    op: str
    tensor: str | None = None  # argument whose shape/dtype the peers must agree on
    root: str | None = None  # global-rank root argument (src/dst)
    group_root: str | None = None  # the same as a group rank (group_src/group_dst)
    reduce: str | None = None
    p2p: str | None = None  # "send" or "recv": the peer argument is root/group_root
    can_async: bool = True
    obj: bool = False  # object collective: sizes differ legitimately, not fingerprinted


API: dict[str, CallSpec] = {
    "all_reduce": CallSpec("all_reduce", tensor="tensor", reduce="op"),
    "all_gather": CallSpec("all_gather", tensor="tensor"),
    "all_gather_into_tensor": CallSpec("all_gather", tensor="input_tensor"),
    "reduce_scatter": CallSpec("reduce_scatter", tensor="output", reduce="op"),
    "reduce_scatter_tensor": CallSpec("reduce_scatter", tensor="input", reduce="op"),
    # FSDP2's collectives in torch 2.13 (`_fsdp_collectives.DefaultAllGather` and friends)
    "all_gather_single": CallSpec("all_gather", tensor="input_tensor"),
    "reduce_scatter_single": CallSpec("reduce_scatter", tensor="input", reduce="op"),
    "broadcast": CallSpec("broadcast", tensor="tensor", root="src", group_root="group_src"),
    "reduce": CallSpec("reduce", tensor="tensor", root="dst", group_root="group_dst", reduce="op"),
    "gather": CallSpec("gather", tensor="tensor", root="dst", group_root="group_dst"),
    "scatter": CallSpec("scatter", tensor="tensor", root="src", group_root="group_src"),
    "all_to_all": CallSpec("all_to_all"),
    "all_to_all_single": CallSpec("all_to_all"),
    "barrier": CallSpec("barrier"),
    "monitored_barrier": CallSpec("barrier", can_async=False),
    "send": CallSpec("send", tensor="tensor", root="dst", group_root="group_dst", p2p="send"),
    "recv": CallSpec("recv", tensor="tensor", root="src", group_root="group_src", p2p="recv"),
    "isend": CallSpec("isend", tensor="tensor", root="dst", group_root="group_dst", p2p="send"),
    "irecv": CallSpec("irecv", tensor="tensor", root="src", group_root="group_src", p2p="recv"),
    "all_gather_object": CallSpec("all_gather", can_async=False, obj=True),
    "gather_object": CallSpec(
        "gather", root="dst", group_root="group_dst", can_async=False, obj=True
    ),
    "broadcast_object_list": CallSpec(
        "broadcast", root="src", group_root="group_src", can_async=False, obj=True
    ),
    "scatter_object_list": CallSpec(
        "scatter", root="src", group_root="group_src", can_async=False, obj=True
    ),
    "send_object_list": CallSpec(
        "send", root="dst", group_root="group_dst", p2p="send", can_async=False, obj=True
    ),
    "recv_object_list": CallSpec(
        "recv", root="src", group_root="group_src", p2p="recv", can_async=False, obj=True
    ),
}


# `torch.distributed._functional_collectives` (DTensor, tensor parallel, context parallel,
# loss parallel): function -> (trace op, reduce-op argument, root argument). Their tensor is
# `self`, their group any of funcol's group forms, their result waited by `wait_tensor`.
FUNCOL: dict[str, tuple[str, str | None, str | None]] = {
    "all_reduce": ("all_reduce", "reduceOp", None),
    "all_gather_tensor": ("all_gather", None, None),
    "all_gather_single": ("all_gather", None, None),
    "all_gather_tensor_autograd": ("all_gather", None, None),
    "reduce_scatter_tensor": ("reduce_scatter", "reduceOp", None),
    "reduce_scatter_single": ("reduce_scatter", "reduceOp", None),
    "reduce_scatter_tensor_autograd": ("reduce_scatter", "reduceOp", None),
    "all_to_all_single": ("all_to_all", None, None),
    "all_to_all_single_autograd": ("all_to_all", None, None),
    "broadcast": ("broadcast", None, "src"),
}


@dataclass(slots=True)
class Call:
    """One call as the guard records it."""

    op: str
    group: Any  # the ProcessGroup object, or None for the default group
    is_async: bool
    root: int | None = None  # global rank (root of a collective, peer of p2p)
    tensor: Any = None
    reduce_op: str | None = None
    p2p: str | None = None
    tag: int = 0
    obj: bool = False
    # all_to_all: elements sent to / expected from each group member, in group-rank order
    in_splits: list[int] | None = None
    out_splits: list[int] | None = None


_PARAMETERS: dict[str, tuple[str, ...] | None] = {}


def arguments(name: str, fn: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, as `inspect.Signature.bind_partial` gives them
    (defaults not filled in), without its cost on every call: positional arguments are
    matched to the function's parameter names, learned once per function."""
    names = _PARAMETERS.get(name, ())
    if names == ():
        params = inspect.signature(fn).parameters.values()
        plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ok = all(p.kind in plain or p.kind == inspect.Parameter.KEYWORD_ONLY for p in params)
        names = _PARAMETERS[name] = tuple(p.name for p in params if p.kind in plain) if ok else None
    if names is None or len(args) > len(names):  # *args / **kwargs: the slow, exact way
        return dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


# id(op) -> (op, its name): the op kept, so its id stays its own; by identity, as hashing a
# pybind enum costs about as much as reading its name
_REDUCE_NAMES: dict[int, tuple[Any, str]] = {}


def reduce_name(op: Any) -> str | None:
    """`sum`, `avg`, ... of a reduce op, named once per op object (reading a pybind enum's
    name cost 5 us a call, a third of a recorded reduce-scatter's guard work)."""
    if op is None:
        return "sum"
    known = _REDUCE_NAMES.get(id(op))
    if known is not None and known[0] is op:
        return known[1]
    name = getattr(op, "name", None) or str(op)
    text = str(name).rsplit(".", 1)[-1].lower()
    if len(_REDUCE_NAMES) < 256:  # ops made per call (premul sums) are not kept
        _REDUCE_NAMES[id(op)] = (op, text)
    return text


def describe(name: str, fn: Any, args: tuple, kwargs: dict, dist: Any) -> Call | None:
    """The call's facts, or None when the guard cannot read them (then it is not recorded)."""
    spec = API[name]
    bound = arguments(name, fn, args, kwargs)
    group = bound.get("group")
    if group is not None and group is dist.GroupMember.NON_GROUP_MEMBER:
        return None  # torch returns at once on a group this rank is not in
    root = bound.get(spec.root) if spec.root else None
    group_root = bound.get(spec.group_root) if spec.group_root else None
    if root is None and group_root is not None:
        root = dist.get_global_rank(group or dist.group.WORLD, group_root)
    if root is None and spec.op in ("broadcast", "reduce", "gather", "scatter") and not spec.p2p:
        root = 0 if group is None else None
    op = spec.op
    is_async = bool(bound.get("async_op", False)) if spec.can_async else False
    if spec.p2p:
        is_async = op in ("isend", "irecv")
    in_splits = out_splits = None
    if spec.op == "all_to_all":
        in_splits, out_splits = all_to_all_splits(name, bound, group, dist)
    return Call(
        op=op,
        group=group,
        is_async=is_async,
        root=int(root) if root is not None else None,
        tensor=bound.get(spec.tensor) if spec.tensor else None,
        reduce_op=reduce_name(bound.get(spec.reduce)) if spec.reduce else None,
        p2p=spec.p2p,
        tag=int(bound.get("tag") or 0),
        obj=spec.obj,
        in_splits=in_splits,
        out_splits=out_splits,
    )


def all_to_all_splits(
    name: str, bound: dict[str, Any], group: Any, dist: Any
) -> tuple[list[int] | None, list[int] | None]:
    """What an all_to_all sends to and expects from each member, in elements: rank i's
    i→j count must equal rank j's expected count from i (gloo aborts a rank that receives
    more than it posted; less is silent corruption). None when the call cannot be read."""
    try:
        if name == "all_to_all":
            outs, ins = bound["output_tensor_list"], bound["input_tensor_list"]
            return [int(t.numel()) for t in ins], [int(t.numel()) for t in outs]
        if name != "all_to_all_single":
            return None, None
        n = dist.get_world_size(group)
        return (
            _counts(bound["input"], bound.get("input_split_sizes"), n),
            _counts(bound["output"], bound.get("output_split_sizes"), n),
        )
    except Exception:  # a call torch itself will reject: not the guard's to judge
        return None, None


def _counts(tensor: Any, splits: Any, n: int) -> list[int]:
    rows = int(tensor.shape[0]) if tensor.dim() else 1
    per_row = int(tensor.numel()) // rows if rows else 0
    if not splits:  # torch splits dimension 0 evenly
        return [rows // n * per_row] * n
    return [int(s) * per_row for s in splits]


def describe_funcol(name: str, fn: Any, args: tuple, kwargs: dict, dist: Any) -> Call | None:
    """A functional collective's facts (always async: its result is waited on first use)."""
    import torch.distributed._functional_collectives as funcol

    op, reduce, root_arg = FUNCOL[name]
    bound = arguments(f"funcol.{name}", fn, args, kwargs)
    if "group" not in bound:
        return None
    group = funcol._resolve_group(bound["group"], bound.get("tag", ""))
    if isinstance(group, str):
        group = dist.distributed_c10d._resolve_process_group(group)
    root = None
    if root_arg is not None and bound.get(root_arg) is not None:
        root = dist.get_global_rank(group, int(bound[root_arg]))
    tensor = bound.get("self")
    return Call(
        op=op,
        group=None if group is dist.group.WORLD else group,
        is_async=True,
        root=root,
        tensor=tensor if hasattr(tensor, "shape") else None,
        reduce_op=str(bound[reduce]).lower() if reduce and bound.get(reduce) else None,
    )


def splits_agree(seen: dict[int, dict[str, Any]], members: list[int]) -> bool:
    """An all_to_all's counts pair up: what member i sends to member j is what j expects
    from i, for every pair whose fingerprints are in (other calls: nothing to pair)."""
    for i, ri in enumerate(members):
        sent = seen.get(ri, {}).get("in_splits")
        for j, rj in enumerate(members):
            got = seen.get(rj, {}).get("out_splits")
            if sent is not None and got is not None and sent[j : j + 1] != got[i : i + 1]:
                return False
    return True
