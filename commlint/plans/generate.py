"""Expand a parallelism configuration into per-rank traces: the `generate:` block.

```yaml
version: 1
generate: {world_size: 1024, degrees: {tp: 8, pp: 8, dp: 16}, schedule: 1f1b, microbatches: 64}
```

The expansion follows what Megatron-LM and torchtitan do at run time:

- **groups** are built with the masked-orthogonal rule of Megatron's `RankGenerator` (axes
  listed fastest first, `tp-cp-ep-dp-pp` by default) or torchtitan's `ParallelDims` mesh
  (`pp, dp_replicate, dp_shard, cp, tp`, tp fastest; EP borrowed from `dp_shard × cp`); every
  rank creates every group, in the frameworks' creation order;
- **the pipeline** runs a schedule from `commlint.plans.schedules` (GPipe, 1F1B, interleaved
  1F1B, ZB-H1, or a torch.distributed.pipelining CSV), its p2p lowered in the style of
  Megatron (per-op isend/irecv with even/odd parity ordering), Megatron batched
  (`batch_isend_irecv`), torch pipelining's runtime, or DeepSpeed's (blocking, parity);
- **per layer** TP all-reduces (or sequence-parallel all-gather/reduce-scatter), CP ring
  exchanges, EP all_to_alls and FSDP all-gathers/reduce-scatters; **per step** the DP gradient
  sync, the expert-DP sync and the embedding all-reduce between first and last stage.

`mutations` inject the mistakes that hang real jobs (head-to-head sends, a fixed p2p order,
a FIFO order mismatch, the embedding all-reduce before the pipeline drains, a last-microbatch
decision that differs across DP ranks), so a gate can be shown to catch them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from commlint.findings import CommlintInputError
from commlint.graph.symmetry import Symmetry, attach
from commlint.plans import schedules as sch
from commlint.plans.gate import MAX_NAMED_BYTES, named_file, read_text
from commlint.plans.lazy import GeneratedTrace, LazyRanks
from commlint.trace import ACTION_DEFAULTS, Action, SharedAction, Trace, built_action

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What a `generate:` block may expand to: 131,072 ranks (building the layout costs about
# 5 kB per rank) and 16,777,216 actions in all (about 2 GB of checker state).
MAX_GENERATED_WORLD = 1 << 17
MAX_GENERATED_ACTIONS = 1 << 24

# ----------------------------------------------------------------------------- the spec


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Degrees(_Spec):
    """Parallel degrees. `dp` is `dp_replicate × dp_shard`; give either form."""

    tp: int = Field(default=1, ge=1, description="Tensor parallel degree.")
    cp: int = Field(default=1, ge=1, description="Context parallel degree.")
    ep: int = Field(default=1, ge=1, description="Expert parallel degree (carved out of DP).")
    etp: int | None = Field(
        default=None, ge=1, description="Expert tensor parallel degree (default: tp)."
    )
    dp: int | None = Field(default=None, ge=1, description="Data parallel degree (inferred).")
    dp_replicate: int | None = Field(default=None, ge=1, description="DDP / HSDP replicas.")
    dp_shard: int | None = Field(default=None, ge=1, description="FSDP shard degree.")
    pp: int = Field(default=1, ge=1, description="Pipeline parallel degree.")
    vpp: int = Field(default=1, ge=1, description="Virtual stages (model chunks) per rank.")


class P2P(_Spec):
    """How pipeline stages exchange activations and gradients."""

    style: Literal["megatron", "batched", "torch", "deepspeed"] = "megatron"
    order: Literal["parity", "even-sends-first", "fixed"] | None = None
    blocking: bool | None = None
    tags: Literal["none", "microbatch"] = "none"


class Collectives(_Spec):
    """Which collectives each axis issues."""

    tp: Literal["all_reduce", "sequence_parallel", "none"] = "all_reduce"
    cp: Literal["ring", "all_to_all", "none"] = "ring"
    ep: Literal["all_to_all", "none"] = "all_to_all"
    dp: Literal["all_reduce", "distributed_optimizer", "fsdp", "none"] | None = None
    embedding: bool = True
    buckets: int = Field(default=1, ge=1)
    overlap_grad_reduce: bool = False


class Activation(_Spec):
    """Payload of pipeline p2p, so the gate can compare sizes."""

    shape: list[int] = Field(min_length=1)
    dtype: str = "bfloat16"


MutationKind = Literal[
    "fixed_order",
    "head_to_head",
    "fifo_mismatch",
    "early_embedding_allreduce",
    "last_microbatch",
]


class Mutation(_Spec):
    """A deliberate mistake, to show the gate catches it."""

    kind: MutationKind
    stage: int | None = Field(default=None, ge=0)
    stages: list[int] | None = None
    microbatches: list[int] | int | None = None
    dp_rank: int | None = Field(default=None, ge=0)


class ScheduleFile(_Spec):
    """`schedule: {csv: path}` or `{csv_text: "..."}` (torch.distributed.pipelining CSV)."""

    csv: str | None = None
    csv_text: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ScheduleFile:
        if (self.csv is None) == (self.csv_text is None):
            raise ValueError("give exactly one of 'csv' (a path) or 'csv_text'")
        return self


class GenerateSpec(_Spec):
    """The `generate:` block of a plan file."""

    world_size: int | None = Field(default=None, ge=1)
    degrees: Degrees = Field(default_factory=Degrees)
    layout: Literal["megatron", "torchtitan"] = "megatron"
    order: str | None = None
    schedule: str | ScheduleFile = "1f1b"
    microbatches: int | None = Field(default=None, ge=1)
    layers: int = Field(default=1, ge=0, description="Transformer layers per virtual stage.")
    p2p: Literal["megatron", "batched", "torch", "deepspeed"] | P2P = "megatron"
    collectives: Collectives = Field(default_factory=Collectives)
    activation: Activation | None = None
    seq_lengths: list[int] | None = None
    backend: str = "nccl"
    mutations: list[Mutation | MutationKind] = Field(default_factory=list)


# ----------------------------------------------------------------------------- errors


_TYPE_ERRORS = frozenset(
    {"string_type", "dict_type", "model_type", "model_attributes_type", "int_type", "list_type"}
)
_UNION_BRANCHES = ("str", "int", "P2P", "ScheduleFile", "Mutation")


def _clean_loc(loc: tuple) -> list[str]:
    """A pydantic location without the union-branch markers it adds."""
    parts = [str(p) for p in loc]
    return [
        p for p in parts if not p.startswith(("function-", "literal[")) and p not in _UNION_BRANCHES
    ]


def _spec_error(exc: ValidationError) -> CommlintInputError:
    errors = exc.errors()
    first = _clean_loc(errors[0]["loc"])
    same = [e for e in errors if _clean_loc(e["loc"])[: len(first)] == first]
    # in a union, the branch that matched the input's shape says more than "not a string"
    err = min(same, key=lambda e: (e["type"] in _TYPE_ERRORS, -len(_clean_loc(e["loc"]))))
    loc = _clean_loc(err["loc"])
    where = "generate." + ".".join(loc) if loc else "generate"
    if err["type"] == "extra_forbidden":
        parent = _parent_model(loc[:-1])
        known = ", ".join(parent.model_fields) if parent is not None else ""
        exc = CommlintInputError(f"{where}: unknown field (expected one of: {known})")
    else:
        msg = re.sub(r"a valid dictionary or instance of \w+", "a mapping", err["msg"])
        msg = msg.removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = f"got {err['input']!r}; expected {err['ctx']['expected']}"
        exc = CommlintInputError(f"{where}: {msg[0].lower() + msg[1:]}")
    exc.field = ".".join(loc) or None  # type: ignore[attr-defined]
    return exc


def _parent_model(path: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = GenerateSpec
    nested = {
        "degrees": Degrees,
        "p2p": P2P,
        "collectives": Collectives,
        "activation": Activation,
        "schedule": ScheduleFile,
        "mutations": Mutation,
    }
    for part in path:
        if part.isdigit():
            continue
        sub = nested.get(part)
        if sub is None:
            return None
        model = sub
    return model


def _fail(message: str, at: str | None = None) -> CommlintInputError:
    """A located error; `at` is the dotted key in the block it is about (`degrees.vpp`)."""
    exc = CommlintInputError(f"generate: {message}")
    exc.field = at  # type: ignore[attr-defined]
    return exc


def _locate(plan_path: str, field: str) -> tuple[int, int] | None:
    """(line, column) of `generate.<field>` in the plan file, or of its nearest parent."""
    try:
        root = yaml.compose(Path(plan_path).read_text(encoding="utf-8"), Loader=_YamlLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    node, found = root, None
    for part in ["generate", *field.split(".")]:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    nxt, found = value, key
                    break
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            nxt = found = node.value[int(part)]
        if nxt is None:
            break
        node = nxt
    if found is None:
        return None
    return found.start_mark.line + 1, found.start_mark.column + 1


# ----------------------------------------------------------------------------- layout

_MEGATRON_GROUPS = (  # parallel_state's creation order; (kind, axes)
    ("dp_cp", ("dp_shard", "dp_replicate", "cp")),
    ("dp", ("dp_shard", "dp_replicate")),
    ("cp", ("cp",)),
    ("mp", ("tp", "pp")),
    ("tp", ("tp",)),
    ("pp", ("pp",)),
    ("tp_dp_cp", ("tp", "dp_shard", "dp_replicate", "cp")),
    ("tp_dp", ("tp", "dp_shard", "dp_replicate")),
    ("tp_cp", ("tp", "cp")),
)
_HSDP_GROUPS = (("dp_shard_cp", ("dp_shard", "cp")), ("dp_replicate", ("dp_replicate",)))
_TORCHTITAN_GROUPS = (  # ParallelDims.build_mesh: mesh dims, then the flattened ones
    ("pp", ("pp",)),
    ("dp_replicate", ("dp_replicate",)),
    ("dp_shard", ("dp_shard",)),
    ("cp", ("cp",)),
    ("tp", ("tp",)),
    ("dp", ("dp_shard", "dp_replicate")),
    ("dp_shard_cp", ("dp_shard", "cp")),
    ("dp_cp", ("dp_shard", "dp_replicate", "cp")),
)


def orthogonal_groups(sizes: list[int], mask: list[bool]) -> list[list[int]]:
    """Groups spanning the masked axes (axes listed fastest first), as Megatron builds them.

    Rank `r` has coordinate `(r // stride_i) % size_i` on axis `i`, with strides the prefix
    products of the sizes. A group fixes the unmasked coordinates and varies the masked ones;
    groups are numbered by their unmasked coordinates, members by their masked ones (both
    fastest axis first).
    """
    strides = [prod(sizes[:i]) for i in range(len(sizes))]
    inner = [(s, st) for s, st, m in zip(sizes, strides, mask, strict=True) if m]
    outer = [(s, st) for s, st, m in zip(sizes, strides, mask, strict=True) if not m]

    def offsets(axes: list[tuple[int, int]]) -> list[int]:
        out = [0]
        for size, stride in axes:
            out = [o + k * stride for k in range(size) for o in out]
        return out

    inner_offsets = offsets(inner)
    return [[base + o for o in inner_offsets] for base in offsets(outer)]


@dataclass
class Layout:
    """Degrees resolved, the axis order, every group, and each rank's place in each kind."""

    world_size: int
    tp: int
    cp: int
    ep: int
    etp: int
    dp_replicate: int
    dp_shard: int
    pp: int
    vpp: int
    order: list[str]
    groups: dict[str, list[int]] = field(default_factory=dict)
    # rank -> kind -> (group name, members, index of the rank in it)
    place: list[dict[str, tuple[str, list[int], int]]] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    # the dense axes, fastest first, and their sizes (rank coordinates come from these)
    axis_names: list[str] = field(default_factory=list)
    axis_dims: list[int] = field(default_factory=list)

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def add(self, kind: str, members_list: Iterable[list[int]]) -> None:
        for i, members in enumerate(members_list):
            if len(members) < 2:
                continue  # a group of one carries no communication
            name = f"{kind}{i}"
            self.kinds.add(kind)
            self.groups[name] = members
            for j, r in enumerate(members):
                self.place[r][kind] = (name, members, j)


_ORDER_TOKENS = ("tp", "cp", "ep", "dp", "dp_shard", "dp_replicate", "pp")


def _axes(order: list[str], sizes: dict[str, int]) -> tuple[list[str], list[int]]:
    """Expand `dp` into `dp_shard-dp_replicate` (shard fastest) and drop nothing else."""
    names: list[str] = []
    for tok in order:
        names.extend(("dp_shard", "dp_replicate") if tok == "dp" else (tok,))
    return names, [sizes[n] for n in names]


def resolve_layout(spec: GenerateSpec) -> Layout:
    """Degrees → groups, checking that the numbers fit together."""
    d = spec.degrees
    base = d.tp * d.cp * d.pp
    if d.dp is not None and (d.dp_replicate is not None or d.dp_shard is not None):
        rep, shard = d.dp_replicate or 1, d.dp_shard or 1
        if rep * shard != d.dp:
            raise _fail(
                f"degrees.dp ({d.dp}) must equal dp_replicate × dp_shard ({rep} × {shard})",
                at="degrees.dp",
            )
    dp_style = spec.collectives.dp
    if d.dp_replicate is not None or d.dp_shard is not None:
        rep = d.dp_replicate or 1
        shard = d.dp_shard
        if shard is None and spec.world_size is not None:
            shard = spec.world_size // (base * rep) if spec.world_size % (base * rep) == 0 else 0
        shard = shard or 1
    else:
        dp = d.dp
        if dp is None:
            if spec.world_size is None:
                dp = 1
            elif spec.world_size % base:
                raise _fail(
                    f"world_size {spec.world_size} is not a multiple of tp × cp × pp "
                    f"({d.tp} × {d.cp} × {d.pp} = {base})",
                    at="world_size",
                )
            else:
                dp = spec.world_size // base
        rep, shard = (1, dp) if dp_style == "fsdp" else (dp, 1)
    world = base * rep * shard
    if world > MAX_GENERATED_WORLD:
        raise _fail(
            f"world size {world} is more than commlint generates ({MAX_GENERATED_WORLD} ranks)",
            at="world_size" if spec.world_size is not None else "degrees",
        )
    if spec.world_size is not None and spec.world_size != world:
        raise _fail(
            f"world_size {spec.world_size} does not equal tp × cp × pp × dp "
            f"({d.tp} × {d.cp} × {d.pp} × {rep * shard} = {world})",
            at="world_size",
        )
    etp = d.etp or d.tp
    if spec.layout == "megatron":
        default_order = "tp-cp-ep-dp-pp"
    else:
        default_order = "tp-cp-dp_shard-dp_replicate-pp"
    order = (spec.order or default_order).split("-")
    unknown = [t for t in order if t not in _ORDER_TOKENS]
    if unknown:
        raise _fail(
            f"order: unknown token {unknown[0]!r} (expected {', '.join(_ORDER_TOKENS)})", at="order"
        )
    if len(set(order)) != len(order):
        raise _fail(f"order {spec.order!r} names an axis twice", at="order")
    for tok, size in (("tp", d.tp), ("cp", d.cp), ("pp", d.pp)):
        if tok not in order:
            if size != 1:
                raise _fail(
                    f"order {'-'.join(order)!r} has no '{tok}' but degrees.{tok} is {size}",
                    at="order",
                )
            order.append(tok)
    has_dp = "dp" in order
    has_split = "dp_shard" in order or "dp_replicate" in order
    if has_dp and has_split:
        raise _fail("order: use either 'dp' or 'dp_shard'/'dp_replicate', not both", at="order")
    if not has_dp and not has_split:
        if rep * shard != 1:
            raise _fail(
                f"order {'-'.join(order)!r} has no 'dp' but the dp degree is {rep * shard}",
                at="order",
            )
        order.append("dp")
    if has_split:
        for tok in ("dp_shard", "dp_replicate"):
            if tok not in order:
                order.insert(order.index("pp"), tok)
    lay = Layout(world, d.tp, d.cp, d.ep, etp, rep, shard, d.pp, d.vpp, order)
    lay.place = [{} for _ in range(world)]
    sizes = {"tp": d.tp, "cp": d.cp, "ep": 1, "dp_shard": shard, "dp_replicate": rep, "pp": d.pp}
    dense = [t for t in order if t != "ep"] if spec.layout == "torchtitan" else order
    names, dims = _axes(dense, sizes)
    lay.axis_names, lay.axis_dims = names, dims
    if spec.layout == "megatron":
        kinds = _MEGATRON_GROUPS + (_HSDP_GROUPS if shard > 1 and rep > 1 else ())
    else:
        kinds = _TORCHTITAN_GROUPS
    for kind, axes in kinds:
        groups = orthogonal_groups(dims, [n in axes for n in names])
        lay.add(kind, groups)
        if kind == "pp" and spec.layout == "megatron":
            # the embedding group: first and last stage of each pipeline
            lay.add("embd", [[g[0], g[-1]] for g in groups if len(g) > 1])
    if d.ep > 1:
        _expert_groups(spec, lay)
    return lay


def _expert_groups(spec: GenerateSpec, lay: Layout) -> None:
    ep, etp = lay.ep, lay.etp
    if spec.layout == "megatron":
        if lay.world_size % (etp * ep * lay.pp):
            raise _fail(
                f"world_size {lay.world_size} is not a multiple of etp × ep × pp "
                f"({etp} × {ep} × {lay.pp})",
                at="world_size",
            )
        edp = lay.world_size // (etp * ep * lay.pp)
        order = [t for t in lay.order if t not in ("dp_shard", "dp_replicate")]
        if "dp" not in order:
            order.insert(order.index("pp"), "dp")
        if "ep" not in order:
            raise _fail("order must contain 'ep' when degrees.ep > 1", at="order")
        sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": lay.pp}
        enames = order
        edims = [sizes[t] for t in order]
        for kind, axes in (
            ("ep", ("ep",)),
            ("etp", ("tp",)),
            ("tp_ep", ("tp", "ep")),
            ("tp_ep_pp", ("tp", "ep", "pp")),
            ("edp", ("dp",)),
        ):
            lay.add(kind, orthogonal_groups(edims, [n in axes for n in enames]))
        return
    # torchtitan: EP borrows all of cp (and tp when etp == 1) and part of dp_shard
    if etp not in (lay.tp, 1):
        raise _fail(f"layout torchtitan supports etp == tp or etp == 1, not {etp}", at="degrees.ep")
    borrowed = lay.cp * (lay.tp if etp == 1 and lay.tp > 1 else 1)
    if ep % borrowed or (lay.dp_shard * borrowed) % ep:
        raise _fail(
            f"layout torchtitan: ep ({ep}) must be a multiple of {borrowed} "
            f"(cp{' × tp' if borrowed != lay.cp else ''}) and divide dp_shard × that "
            f"({lay.dp_shard * borrowed})",
            at="degrees.ep",
        )
    in_ep = ep // borrowed
    mod_ep = lay.dp_shard // in_ep
    # fastest first: tp, cp, dp_shard_in_ep, dp_shard_mod_ep, dp_replicate, pp
    enames = ["tp", "cp", "dp_shard_in_ep", "dp_shard_mod_ep", "dp_replicate", "pp"]
    edims = [lay.tp, lay.cp, in_ep, mod_ep, lay.dp_replicate, lay.pp]
    ep_axes = {"cp", "dp_shard_in_ep"} | ({"tp"} if etp == 1 else set())
    lay.add("ep", orthogonal_groups(edims, [n in ep_axes for n in enames]))
    lay.add("edp", orthogonal_groups(edims, [n == "dp_shard_mod_ep" for n in enames]))


# ----------------------------------------------------------------------------- skeletons

# A skeleton op is what one pipeline position does, before ranks and group names are known:
# (op, kind, peer, label, handle, handles, batch, tag, is_async, shape, dtype)
# `kind` is a group kind ("tp", "pp", …); `peer` is ("pos", q) — member q of the rank's
# group of that kind — or ("ring", ±1) — the rank's neighbour in it.
SkOp = tuple


@dataclass
class Options:
    """The spec, resolved into what the lowering needs."""

    style: str
    order: str
    blocking: bool
    tags: bool
    layers: int
    tp: str
    cp: str
    ep: str
    dp: str
    embedding: bool
    buckets: int
    overlap: bool
    shape: list[int] | None
    dtype: str | None
    seq_lengths: list[int] | None
    fixed_stages: set[int]
    h2h_stages: set[int]
    fifo: dict[int, dict[int, int]]  # stage -> microbatch swap map
    early_embedding: bool


_DEFAULT_ORDER = {
    "megatron": "parity",
    "batched": "fixed",
    "deepspeed": "even-sends-first",
    "torch": "parity",
}

_SLOTS_BY_ORDER = {
    "parity": (
        ("send_next", "recv_prev", "send_prev", "recv_next"),
        ("recv_prev", "send_next", "recv_next", "send_prev"),
    ),
    "even-sends-first": (
        ("send_next", "send_prev", "recv_prev", "recv_next"),
        ("recv_prev", "recv_next", "send_next", "send_prev"),
    ),
    "fixed": (
        ("send_prev", "recv_prev", "send_next", "recv_next"),
        ("send_prev", "recv_prev", "send_next", "recv_next"),
    ),
}
_SENDS_FIRST = ("send_next", "send_prev", "recv_prev", "recv_next")


class _Emitter:
    """Builds one pipeline position's skeleton."""

    def __init__(self, opts: Options, lay: Layout, position: int) -> None:
        self.ops: list[SkOp] = []
        self.fsdp_kind = "dp_shard_cp" if "dp_shard_cp" in lay.kinds else "dp_cp"
        self.opts = opts
        self.lay = lay
        self.position = position
        self.n_handles = 0
        self.n_batches = 0

    def handle(self) -> str:
        self.n_handles += 1
        return f"h{self.n_handles}"

    def batch(self) -> str:
        self.n_batches += 1
        return f"b{self.n_batches}"

    def coll(self, op: str, kind: str, label: str, is_async: bool = False) -> str | None:
        if not self._has(kind):
            return None
        h = self.handle() if is_async else None
        self.ops.append(
            (op, kind, None, label, h, None, None, 0, True if is_async else None, None, None)
        )
        return h

    def wait(self, handles: list[str], label: str) -> None:
        if handles:
            self.ops.append(
                ("wait", None, None, label, None, tuple(handles), None, 0, None, None, None)
            )

    def p2p(
        self,
        op: str,
        kind: str,
        peer: tuple,
        label: str,
        handle: str | None = None,
        batch: str | None = None,
        tag: int = 0,
        shape: list[int] | None = None,
    ) -> None:
        dtype = self.opts.dtype if shape is not None else None
        self.ops.append((op, kind, peer, label, handle, None, batch, tag, None, shape, dtype))

    def _has(self, kind: str) -> bool:
        return kind in self.lay.kinds

    # per-layer collectives ---------------------------------------------------------

    def layer_forward(self, what: str, moe: bool) -> None:
        o, lay = self.opts, self.lay
        for layer in range(o.layers):
            tag = f"{what} layer {layer}"
            if o.dp == "fsdp" and lay.dp_shard * lay.cp > 1:
                self.coll("all_gather", self.fsdp_kind, f"{tag} FSDP all-gather params")
            self._cp(tag)
            self._tp(tag)
            if moe:
                self.coll("all_to_all", "ep", f"{tag} MoE dispatch")
                self.coll("all_to_all", "ep", f"{tag} MoE combine")

    def layer_backward(self, what: str, moe: bool, input_grad: bool, weight_grad: bool) -> None:
        o, lay = self.opts, self.lay
        fsdp = o.dp == "fsdp" and lay.dp_shard * lay.cp > 1
        for layer in reversed(range(o.layers)):
            tag = f"{what} layer {layer}"
            if input_grad:
                if fsdp:
                    self.coll("all_gather", self.fsdp_kind, f"{tag} FSDP all-gather params")
                if moe:
                    self.coll("all_to_all", "ep", f"{tag} MoE combine grad")
                    self.coll("all_to_all", "ep", f"{tag} MoE dispatch grad")
                self._tp(tag)
                self._cp(tag)
            if weight_grad and fsdp:
                self.coll("reduce_scatter", self.fsdp_kind, f"{tag} FSDP reduce-scatter grads")

    def _tp(self, tag: str) -> None:
        style = self.opts.tp
        if style == "none" or self.lay.tp < 2:
            return
        for block in ("attention", "mlp"):
            if style == "all_reduce":
                self.coll("all_reduce", "tp", f"{tag} {block} TP all-reduce")
            else:
                self.coll("all_gather", "tp", f"{tag} {block} SP all-gather")
                self.coll("reduce_scatter", "tp", f"{tag} {block} SP reduce-scatter")

    def _cp(self, tag: str) -> None:
        style, cp = self.opts.cp, self.lay.cp
        if style == "none" or cp < 2:
            return
        if style == "all_to_all":
            self.coll("all_to_all", "cp", f"{tag} CP all-to-all (heads)")
            self.coll("all_to_all", "cp", f"{tag} CP all-to-all (sequence)")
            return
        for step in range(cp - 1):
            b = self.batch()
            hs, hr = self.handle(), self.handle()
            self.p2p("isend", "cp", ("ring", 1), f"{tag} CP ring {step} send kv", hs, b)
            self.p2p("irecv", "cp", ("ring", -1), f"{tag} CP ring {step} recv kv", hr, b)
            self.wait([hs, hr], f"{tag} CP ring {step} wait")


def _resolve_options(spec: GenerateSpec, lay: Layout) -> Options:
    p2p = spec.p2p if isinstance(spec.p2p, P2P) else P2P(style=spec.p2p)
    if "p2p" not in spec.model_fields_set and isinstance(spec.schedule, ScheduleFile):
        p2p = P2P(style="torch")  # a torch.distributed.pipelining schedule runs on its runtime
    dp = spec.collectives.dp or ("fsdp" if lay.dp_shard > 1 else "all_reduce")
    if dp != "fsdp" and lay.dp_shard > 1 and lay.dp_replicate > 1:
        raise _fail(
            "degrees.dp_shard > 1 with dp_replicate > 1 needs collectives.dp: fsdp",
            at="collectives.dp",
        )
    shape = list(spec.activation.shape) if spec.activation else None
    if spec.seq_lengths is not None and shape is None:
        shape = [1, 1]
    opts = Options(
        style=p2p.style,
        order=p2p.order or _DEFAULT_ORDER[p2p.style],
        blocking=p2p.blocking if p2p.blocking is not None else p2p.style == "deepspeed",
        tags=p2p.tags == "microbatch",
        layers=spec.layers,
        tp=spec.collectives.tp,
        cp=spec.collectives.cp,
        ep=spec.collectives.ep,
        dp=dp,
        embedding=spec.collectives.embedding,
        buckets=spec.collectives.buckets,
        overlap=spec.collectives.overlap_grad_reduce,
        shape=shape,
        dtype=spec.activation.dtype if spec.activation else ("bfloat16" if shape else None),
        seq_lengths=spec.seq_lengths,
        fixed_stages=set(),
        h2h_stages=set(),
        fifo={},
        early_embedding=False,
    )
    if p2p.style == "torch" and p2p.order is not None:
        raise _fail(
            "p2p.order does not apply to style 'torch' (its order comes from the lowering)",
            at="order",
        )
    return opts


def _apply_mutations(
    spec: GenerateSpec, lay: Layout, opts: Options, microbatches: int
) -> dict[int, int]:
    """Mutations that change the lowering; returns dp replica -> microbatch count overrides."""
    counts: dict[int, int] = {}
    for i, raw in enumerate(spec.mutations):
        m = raw if isinstance(raw, Mutation) else Mutation(kind=raw)
        where = f"mutations.{i}"

        def stage_ok(s: int, where: str = where) -> int:
            if not 0 <= s < lay.pp:
                raise _fail(
                    f"{where}: stage {s} is outside 0..{lay.pp - 1} (pp {lay.pp})", at=where
                )
            return s

        if m.kind == "fixed_order":
            stages = (
                m.stages
                if m.stages is not None
                else ([m.stage] if m.stage is not None else list(range(lay.pp)))
            )
            opts.fixed_stages |= {stage_ok(s) for s in stages}
        elif m.kind == "head_to_head":
            if lay.pp < 2:
                raise _fail(f"{where}: head_to_head needs pp >= 2", at=where)
            s = stage_ok(m.stage if m.stage is not None else 0)
            if s + 1 >= lay.pp:
                raise _fail(
                    f"{where}: head_to_head pairs stage {s} with {s + 1}; pp is {lay.pp}", at=where
                )
            opts.h2h_stages |= {s, s + 1}
        elif m.kind == "fifo_mismatch":
            s = stage_ok(m.stage if m.stage is not None else min(1, lay.pp - 1))
            mbs = m.microbatches if isinstance(m.microbatches, list) else [0, 1]
            if len(mbs) != 2 or not all(0 <= x < microbatches for x in mbs) or mbs[0] == mbs[1]:
                raise _fail(
                    f"{where}: fifo_mismatch needs microbatches: [a, b], two different "
                    f"microbatches in 0..{microbatches - 1}",
                    at=where,
                )
            a, b = mbs
            opts.fifo.setdefault(s, {}).update({a: b, b: a})
        elif m.kind == "early_embedding_allreduce":
            if lay.pp < 2 or not opts.embedding:
                raise _fail(
                    f"{where}: early_embedding_allreduce needs pp >= 2 and collectives.embedding",
                    at=where,
                )
            opts.early_embedding = True
        elif m.kind == "last_microbatch":
            r = m.dp_rank if m.dp_rank is not None else 0
            if not 0 <= r < lay.dp:
                raise _fail(
                    f"{where}: dp_rank {r} is outside 0..{lay.dp - 1} (dp {lay.dp})", at=where
                )
            n = m.microbatches if isinstance(m.microbatches, int) else microbatches - 1
            if n < 1:
                raise _fail(f"{where}: last_microbatch needs microbatches >= 1", at=where)
            counts[r] = n
    return counts


@dataclass
class PipelinePlan:
    """The compute order of every pipeline position and where each stage lives."""

    steps: dict[int, list[sch.Step]]
    stages: sch.StageMap
    microbatches: int
    with_comms: bool = False
    warmup: dict[int, int] | None = None  # interleaved: warm-up length per position
    lowered: dict[int, list[sch.Step]] | None = None  # torch runtime order, computed once


def _pipeline(spec: GenerateSpec, lay: Layout, microbatches: int) -> PipelinePlan:
    schedule = spec.schedule
    if isinstance(schedule, ScheduleFile):
        if schedule.csv is not None:
            try:  # plan data only (`named_file` checked where): its text is never shown
                text = read_text(schedule.csv, MAX_NAMED_BYTES, "a schedule CSV", quote=False)
            except CommlintInputError as exc:
                raise _fail(f"schedule.csv: {exc.error.message}", at="schedule.csv") from None
            source, quote = f"generate.schedule.csv {schedule.csv}", False
        else:
            text, source, quote = schedule.csv_text or "", "generate.schedule.csv_text", True
        try:
            parsed = sch.read_csv(text, source, quote=quote)
        except CommlintInputError as exc:
            exc.field = "schedule"  # type: ignore[attr-defined]
            raise
        if parsed.stages.pp != lay.pp:
            raise _fail(
                f"the schedule CSV has {parsed.stages.pp} rows but degrees.pp is {lay.pp}",
                at="schedule",
            )
        return PipelinePlan(parsed.steps, parsed.stages, parsed.microbatches, parsed.with_comms)
    name = schedule.lower()
    if name == "csv":
        raise _fail(
            "schedule: csv needs a file: schedule: {csv: path/to/schedule.csv}", at="schedule"
        )
    if name not in sch.SCHEDULES:
        raise _fail(
            f"schedule: unknown schedule {schedule!r} "
            f"(expected {', '.join(sch.SCHEDULES)}, or {{csv: PATH}})",
            at="schedule",
        )
    if lay.vpp > 1 and name != "interleaved":
        raise _fail(
            f"degrees.vpp {lay.vpp} needs schedule: interleaved (not {name})", at="degrees.vpp"
        )
    try:
        steps = sch.build(name, lay.pp, lay.vpp, microbatches)
    except CommlintInputError as exc:
        field = "microbatches" if "microbatches" in exc.error.message else "schedule"
        raise _fail(exc.error.message, at=field) from None
    warmup = None
    if name == "interleaved":
        warmup = {
            p: sch.interleaved_warmup(lay.pp, lay.vpp, microbatches, p) for p in range(lay.pp)
        }
    return PipelinePlan(steps, sch.StageMap.loop(lay.pp, lay.vpp), microbatches, False, warmup)


# ----------------------------------------------------------------------------- lowering


def _comm_of(step: sch.Step, stages: sch.StageMap) -> tuple[list[tuple], list[tuple]]:
    """(recvs before, sends after) of a compute step: (slot, peer position, label)."""
    kind, v, m = step
    me = stages.rank_of(v)
    last = stages.num_stages - 1
    recvs: list[tuple] = []
    sends: list[tuple] = []
    if kind == "F":
        if v > 0 and stages.rank_of(v - 1) != me:
            recvs.append(("recv_prev", stages.rank_of(v - 1), f"F{m} stage {v} recv activation", m))
        if v < last and stages.rank_of(v + 1) != me:
            sends.append(("send_next", stages.rank_of(v + 1), f"F{m} stage {v} send activation", m))
    elif kind in ("B", "I"):
        if v < last and stages.rank_of(v + 1) != me:
            recvs.append(("recv_next", stages.rank_of(v + 1), f"{kind}{m} stage {v} recv grad", m))
        if v > 0 and stages.rank_of(v - 1) != me:
            sends.append(("send_prev", stages.rank_of(v - 1), f"{kind}{m} stage {v} send grad", m))
    return recvs, sends


def _payload(opts: Options, m: int) -> list[int] | None:
    if opts.shape is None:
        return None
    if opts.seq_lengths:
        return [opts.seq_lengths[m % len(opts.seq_lengths)], *opts.shape[1:]]
    return opts.shape


_PP_ON_WORLD = "pp@WORLD"  # peer addressed in the pipeline group, sent on WORLD


def _emit_call(em: _Emitter, ops: list[tuple]) -> None:
    """One Megatron-style p2p call: isend/irecv (or send/recv) in the style's order, then wait."""
    if not ops:
        return
    opts, p = em.opts, em.position
    order = opts.order
    blocking = opts.blocking
    if p in opts.fixed_stages:
        order = "fixed"
    slots = _SLOTS_BY_ORDER[order][p % 2]
    if p in opts.h2h_stages:
        slots, blocking = _SENDS_FIRST, True
    rank_of_slot = {s: i for i, s in enumerate(slots)}
    ops = sorted(ops, key=lambda o: rank_of_slot[o[0]])
    batch = em.batch() if opts.style == "batched" and not blocking else None
    # Megatron's _p2p_ops on a pipeline of 2: even → odd traffic on the pipeline group,
    # odd → even on WORLD, so the two directions are separate communicators
    split = opts.style == "megatron" and em.lay.pp == 2
    handles: list[str] = []
    for slot, peer, label, m in ops:
        is_send = slot.startswith("send")
        tag = m if opts.tags else 0
        shape = _payload(opts, m)
        sender_even = (p if is_send else peer) % 2 == 0
        kind = "pp" if not split or sender_even else _PP_ON_WORLD
        if blocking:
            em.p2p("send" if is_send else "recv", kind, ("pos", peer), label, tag=tag, shape=shape)
        else:
            h = em.handle()
            handles.append(h)
            em.p2p(
                "isend" if is_send else "irecv", kind, ("pos", peer), label, h, batch, tag, shape
            )
    em.wait(handles, "wait " + "; ".join(o[2] for o in ops))


def _same_peers(sends: list[tuple], recvs: list[tuple]) -> bool:
    return {s[1] for s in sends} == {r[1] for r in recvs}


def _emit_compute(em: _Emitter, step: sch.Step, moe: bool) -> None:
    kind, v, m = step
    what = f"{kind}{m} stage {v}"
    if kind == "F":
        em.layer_forward(what, moe)
    elif kind == "B":
        em.layer_backward(what, moe, input_grad=True, weight_grad=True)
    elif kind == "I":
        em.layer_backward(what, moe, input_grad=True, weight_grad=False)
    else:
        em.layer_backward(what, moe, input_grad=False, weight_grad=True)


def _skeleton_calls(
    em: _Emitter, plan: PipelinePlan, steps: list[sch.Step], fuse_all: bool, moe: bool
) -> list[tuple[sch.Step, int]]:
    """Megatron 1F1B / DeepSpeed lowering: p2p calls between consecutive compute steps.

    The sends of a step and the receives of the next one form one call when they go to the
    same peer (Megatron's send_forward_recv_backward / send_backward_recv_forward) or always
    (`fuse_all`); a step without p2p (W of zero-bubble) leaves pending sends pending.
    """
    pending: list[tuple] = []
    marks: list[tuple[sch.Step, int]] = []
    for step in steps:
        recvs, sends = _comm_of(step, plan.stages)
        if not recvs and not sends and step.kind == "W":
            _emit_compute(em, step, moe)
            marks.append((step, len(em.ops)))
            continue
        if pending and recvs and (fuse_all or _same_peers(pending, recvs)):
            _emit_call(em, pending + recvs)
        else:
            _emit_call(em, pending)
            _emit_call(em, recvs)
        _emit_compute(em, step, moe)
        marks.append((step, len(em.ops)))
        pending = sends
    _emit_call(em, pending)
    return marks


def _skeleton_iterations(
    em: _Emitter, plan: PipelinePlan, loops: list[list[sch.Step]], moe: bool
) -> list[tuple[sch.Step, int]]:
    """Megatron's interleaved lowering: after each loop iteration one call carries its sends
    and the receives of the next iteration (send_forward_backward_recv_forward_backward)."""
    marks: list[tuple[sch.Step, int]] = []

    def recvs_of(loop: list[sch.Step]) -> list[tuple]:
        return [r for s in loop for r in _comm_of(s, plan.stages)[0]]

    if loops:
        _emit_call(em, recvs_of(loops[0]))
    for i, loop in enumerate(loops):
        sends: list[tuple] = []
        for step in loop:
            _emit_compute(em, step, moe)
            marks.append((step, len(em.ops)))
            sends.extend(_comm_of(step, plan.stages)[1])
        nxt = recvs_of(loops[i + 1]) if i + 1 < len(loops) else []
        _emit_call(em, sends + nxt)
    return marks


def runtime_lowering(plan: PipelinePlan) -> dict[int, list[sch.Step]]:
    """The SEND/RECV order torch's `_PipelineScheduleRuntime` runs a compute-only schedule in.

    The runtime first inserts UNSHARD/RESHARD/REDUCE_GRAD steps, which take turns in the
    round-robin of `_add_send_recv` and so move where receives land; the pipelining-CSV
    importer reproduces that lowering. Those steps carry no p2p and are dropped here (the
    generator models FSDP and gradient sync as collectives of their own).
    """
    from commlint.plans.importers import pipelining_csv as pcsv

    rows = pcsv.read_csv(sch.dump_csv(plan.steps))
    lowered = pcsv.lower_compute_only(rows, n_microbatches=plan.microbatches)
    out: dict[int, list[sch.Step]] = {}
    for rank, actions in lowered.items():
        row: list[sch.Step] = []
        for a in actions:
            for part in a.parts if a.parts is not None else (a,):
                if part.kind in sch.COMPUTE_KINDS or part.kind in sch.COMM_KINDS:
                    row.append(sch.Step(part.kind, part.stage, part.mb))
        out[rank] = row
    return out


def _skeleton_torch(
    em: _Emitter, plan: PipelinePlan, steps: list[sch.Step], moe: bool
) -> list[tuple[sch.Step, int]]:
    """torch.distributed.pipelining runtime: each SEND/RECV its own batch; a RECV is waited
    just before the compute that needs it; sends are waited at the end of the step."""
    opts, stages = em.opts, plan.stages
    pending_recv: dict[tuple, str] = {}
    send_handles: list[str] = []
    marks: list[tuple[sch.Step, int]] = []
    last = stages.num_stages - 1
    for step in steps:
        kind, v, m = step
        if kind in sch.COMM_KINDS:
            if kind == "SEND_F":
                peer_stage, label = v + 1, f"F{m} stage {v} send activation"
            elif kind == "SEND_B":
                peer_stage, label = v - 1, f"B{m} stage {v} send grad"
            elif kind == "RECV_F":
                peer_stage, label = v - 1, f"F{m} stage {v} recv activation"
            else:
                peer_stage, label = v + 1, f"B{m} stage {v} recv grad"
            if not 0 <= peer_stage <= last:
                raise _fail(f"schedule: {step} has no peer stage {peer_stage}", at="schedule")
            peer = stages.rank_of(peer_stage)
            tag = m if opts.tags else 0
            is_send = kind.startswith("SEND")
            payload = _payload(opts, m)
            if opts.blocking:  # a runtime that runs each comm action as a blocking call
                op = "send" if is_send else "recv"
                em.p2p(op, "pp", ("pos", peer), label, tag=tag, shape=payload)
                continue
            h = em.handle()
            op = "isend" if is_send else "irecv"
            em.p2p(op, "pp", ("pos", peer), label, h, em.batch(), tag, payload)
            if is_send:
                send_handles.append(h)
            else:
                pending_recv[(kind, v, m)] = h
            continue
        need = ("RECV_F", v, m) if kind == "F" else ("RECV_B", v, m) if kind in ("B", "I") else None
        if need is not None and need in pending_recv:
            em.wait([pending_recv.pop(need)], f"{kind}{m} stage {v} wait recv")
        _emit_compute(em, step, moe)
        marks.append((step, len(em.ops)))
    if pending_recv:
        em.wait(list(pending_recv.values()), "end of step: wait leftover recvs")
    em.wait(send_handles, "end of step: wait sends")
    return marks


def _skeleton(
    opts: Options,
    lay: Layout,
    plan: PipelinePlan,
    position: int,
    steps: list[sch.Step],
    fuse_all: bool,
) -> list[SkOp]:
    em = _Emitter(opts, lay, position)
    moe = lay.ep > 1 and opts.ep != "none"
    if opts.style == "torch" and not plan.with_comms:
        if plan.lowered is None:
            plan.lowered = runtime_lowering(plan)
        steps = plan.lowered[position]
    swap = opts.fifo.get(position)
    if swap:  # this stage processes the microbatches in another order than its neighbours
        steps = [sch.Step(s.kind, s.stage, swap.get(s.microbatch, s.microbatch)) for s in steps]
    if opts.style == "torch":
        marks = _skeleton_torch(em, plan, steps, moe)
    else:
        if plan.with_comms:
            steps = [s for s in steps if s.kind in sch.COMPUTE_KINDS]
        if plan.warmup is not None:
            loops = sch.iterations(steps, plan.warmup[position])
            marks = _skeleton_iterations(em, plan, loops, moe)
        else:
            marks = _skeleton_calls(em, plan, steps, fuse_all, moe)
    _finalize(em, opts, lay, position, marks)
    return em.ops


def _finalize(em: _Emitter, opts: Options, lay: Layout, position: int, marks: list) -> None:
    """Gradient sync after the pipeline drained (Megatron's finalize_model_grads)."""
    is_embd = lay.pp > 1 and opts.embedding and position in (0, lay.pp - 1)
    embd_early = is_embd and opts.early_embedding and position == 0
    if embd_early:
        # the mistake: all-reduce the embedding grads right after the last forward, while
        # backward passes are still in flight
        last_f = max(i for i, (s, _) in enumerate(marks) if s.kind == "F")
        cut = marks[last_f][1]
        tail = em.ops[cut:]
        del em.ops[cut:]
        em.coll("all_reduce", "embd", "embedding grads all-reduce (before the pipeline drained)")
        em.ops.extend(tail)
    dp_kind = "dp_cp"
    overlap_handles: list[str] = []
    if opts.dp in ("all_reduce", "distributed_optimizer") and opts.overlap and marks:
        # started by the last backward of the step; waited in finish_grad_sync
        last_b = max((i for i, (s, _) in enumerate(marks) if s.kind in ("B", "W")), default=None)
        if last_b is not None:
            cut = marks[last_b][1]
            tail = em.ops[cut:]
            del em.ops[cut:]
            op = "all_reduce" if opts.dp == "all_reduce" else "reduce_scatter"
            for b in range(opts.buckets):
                h = em.coll(op, dp_kind, f"DP grad bucket {b} {op} (overlapped)", is_async=True)
                if h:
                    overlap_handles.append(h)
            em.ops.extend(tail)
    if overlap_handles:
        em.wait(overlap_handles, "finish_grad_sync: wait DP grad buckets")
    elif opts.dp == "all_reduce":
        for b in range(opts.buckets):
            em.coll("all_reduce", dp_kind, f"DP grad bucket {b} all-reduce")
    elif opts.dp == "distributed_optimizer":
        for b in range(opts.buckets):
            em.coll("reduce_scatter", dp_kind, f"DP grad bucket {b} reduce-scatter")
    elif opts.dp == "fsdp" and lay.dp_replicate > 1:
        for b in range(opts.buckets):
            em.coll("all_reduce", "dp_replicate", f"HSDP replica grad bucket {b} all-reduce")
    if lay.ep > 1 and opts.ep != "none":
        em.coll("all_reduce", "edp", "expert DP grad all-reduce")
    if opts.tp == "sequence_parallel":
        em.coll("all_reduce", "tp", "sequence-parallel layernorm grads all-reduce")
    if is_embd and not embd_early:
        em.coll("all_reduce", "embd", "embedding grads all-reduce")
    if opts.dp == "distributed_optimizer":
        for b in range(opts.buckets):
            em.coll("all_gather", dp_kind, f"DP param bucket {b} all-gather")


# ----------------------------------------------------------------------------- ranks

_DEFAULTS = ACTION_DEFAULTS
_new = Action.__new__
_set = object.__setattr__


def _action_from(data: dict[str, Any], fields_set: set[str]) -> Action:
    """An action shared by every rank that issues it (frozen `SharedAction`), without
    re-validation: the generator only builds valid ones (tested)."""
    return built_action(data, fields_set, SharedAction)


def _action(**values: Any) -> Action:
    return _action_from({**_DEFAULTS, **values}, set(values))


@dataclass
class _Prepared:
    """A skeleton split for fast instantiation: a template holding the rank-independent
    actions, the slots of each group kind's collectives, and the p2p slots."""

    template: list[Action | None]
    # kind -> (slot indices, prototypes); one Action list per group name, built once
    collectives: dict[str, tuple[list[int], list[tuple[dict, set]]]]
    by_group: dict[tuple[str, str], list[Action]]
    # (slot, kind, peer, prototype, fields set)
    p2p: list[tuple[int, str, tuple, dict, set]]


def _prepare(skeleton: list[SkOp]) -> _Prepared:
    template: list[Action | None] = []
    collectives: dict[str, tuple[list[int], list[tuple[dict, set]]]] = {}
    p2p: list[tuple[int, str, tuple, dict, set]] = []
    for i, sk in enumerate(skeleton):
        op, kind, peer, label, handle, handles, batch, tag, is_async, shape, dtype = sk
        values: dict[str, Any] = {"op": op, "label": label}
        if handles is not None:
            values["handles"] = list(handles)
        if handle is not None:
            values["handle"] = handle
        if batch is not None:
            values["batch"] = batch
        if tag:
            values["tag"] = tag
        if is_async is not None:
            values["is_async"] = is_async
        if shape is not None:
            values["shape"] = list(shape)
            values["dtype"] = dtype
        if kind is None:
            template.append(_action(**values))
            continue
        template.append(None)
        fields_set = set(values) | ({"group", "peer"} if peer is not None else {"group"})
        proto = {**_DEFAULTS, **values}
        if peer is None:
            slots, protos = collectives.setdefault(kind, ([], []))
            slots.append(i)
            protos.append((proto, fields_set))
        else:
            p2p.append((i, kind, peer, proto, fields_set))
    return _Prepared(template, collectives, {}, p2p)


def _instantiate(prep: _Prepared, place: dict[str, tuple[str, list[int], int]]) -> list[Action]:
    out = prep.template.copy()
    by_group = prep.by_group
    for kind, (slots, protos) in prep.collectives.items():
        name = place[kind][0]
        actions = by_group.get((kind, name))
        if actions is None:  # first rank of this group: the others share these objects
            actions = by_group[(kind, name)] = [
                _action_from({**proto, "group": name}, fields_set) for proto, fields_set in protos
            ]
        for i, a in zip(slots, actions, strict=True):
            out[i] = a
    new, set_ = _new, _set
    for i, kind, peer, proto, fields_set in prep.p2p:
        if kind == _PP_ON_WORLD:
            _, members, idx = place["pp"]
            name = "WORLD"
        else:
            name, members, idx = place[kind]
        data = proto.copy()
        data["group"] = name
        if peer[0] == "pos":
            data["peer"] = members[peer[1]]
        else:
            data["peer"] = members[(idx + peer[1]) % len(members)]
        a = new(SharedAction)  # built_action, inlined: this runs once per p2p op of every rank
        set_(a, "__dict__", data)
        set_(a, "__pydantic_fields_set__", fields_set)
        set_(a, "__pydantic_extra__", None)
        set_(a, "__pydantic_private__", None)
        out[i] = a
    return out  # type: ignore[return-value]


# ----------------------------------------------------------------------------- symmetry


def _peer_of(place: dict[str, tuple[str, list[int], int]], kind: str, peer: tuple) -> int:
    _, members, idx = place["pp" if kind == _PP_ON_WORLD else kind]
    if peer[0] == "pos":
        return members[peer[1]]
    return members[(idx + peer[1]) % len(members)]


def _automorphism(
    lay: Layout, keys: list[tuple[int, int]], specs: dict[tuple, set], perm: list[int]
) -> dict[str, str] | None:
    """The group renaming φ under which the rank permutation `perm` maps the generated trace
    onto itself, or None if it does not.

    Rank r's actions are `_instantiate(skeleton[keys[r]], place[r])`: the skeleton's ops with
    each group kind's name and each p2p peer filled in from `place[r]`. So `perm` is an
    automorphism when every r has the skeleton of `perm[r]`, group names map one-to-one
    (with `perm` mapping each group's members onto its image's) and every p2p peer of r maps
    to the same peer of `perm[r]`."""
    phi: dict[str, str] = {}
    place = lay.place
    for r, s in enumerate(perm):
        if keys[s] != keys[r]:
            return None
        pr, ps = place[r], place[s]
        if pr.keys() != ps.keys():
            return None
        for kind, there in pr.items():
            image = ps[kind][0]
            if phi.setdefault(there[0], image) != image:
                return None
        for kind, peer in specs[keys[r]]:
            if perm[_peer_of(pr, kind, peer)] != _peer_of(ps, kind, peer):
                return None
    if len(set(phi.values())) != len(phi):
        return None
    for g, h in phi.items():
        if sorted(perm[m] for m in lay.groups[g]) != sorted(lay.groups[h]):
            return None
    return phi


def certify(
    lay: Layout,
    keys: list[tuple[int, int]],
    skeletons: dict[tuple[int, int], _Prepared],
    saved: dict[int, tuple | None],
) -> Symmetry | None:
    """Prove which layout axes the generated trace is symmetric along (see
    `commlint.graph.symmetry` for what is proved and why it makes checking one rank per orbit
    exact). None when no axis qualifies."""
    world = lay.world_size
    dims = lay.axis_dims
    strides = [prod(dims[:i]) for i in range(len(dims))]
    specs = {
        key: {(kind, peer) for _, kind, peer, _, _ in prep.p2p} for key, prep in skeletons.items()
    }
    phis: dict[int, dict[str, str]] = {}
    for i, size in enumerate(dims):
        if size < 2:
            continue
        st = strides[i]
        perm = [
            r + st if (r // st) % size < size - 1 else r - st * (size - 1) for r in range(world)
        ]
        phi = _automorphism(lay, keys, specs, perm)
        if phi is not None:
            phis[i] = phi

    def coord(r: int, i: int) -> int:
        return (r // strides[i]) % dims[i]

    def unfit(axes: set[int]) -> int | None:
        """An axis that breaks condition 1 or 2 for the representatives of `axes`."""
        reps = {r for r in range(world) if all(coord(r, i) == 0 for i in axes)}
        for q in reps:
            pq = lay.place[q]
            for name, members, _ in pq.values():
                for i in axes:
                    if phis[i][name] != name and len({coord(m, i) for m in members}) > 1:
                        return i
            for kind, peer in specs[keys[q]]:
                p = _peer_of(pq, kind, peer)
                if p not in reps:
                    return next(i for i in axes if coord(p, i) != 0)
        return None

    axes = set(phis)
    while axes and (bad := unfit(axes)) is not None:
        axes.discard(bad)
    if not axes:
        return None
    rep_of = [r - sum(coord(r, i) * strides[i] for i in axes) for r in range(world)]
    return Symmetry(
        axes=[lay.axis_names[i] for i in sorted(axes)],
        reps=sorted(set(rep_of)),
        rep_of=rep_of,
        world_size=world,
        saved=saved,
        groups={name: list(members) for name, members in lay.groups.items()},
    )


def _pp_position(lay: Layout, rank: int) -> int:
    pp = lay.place[rank].get("pp")
    return pp[2] if pp else 0


def _dp_index(lay: Layout, rank: int) -> int:
    dp = lay.place[rank].get("dp")
    return dp[2] if dp else 0


def generate_from_spec(
    data: dict[str, Any], plan_path: str | None = None, allow_paths: Iterable[str] = ()
) -> Trace:
    """The `generate:` block (a mapping) → a `Trace`. Errors are `CommlintInputError`s.

    `plan_path` is the plan file the block came from: a `schedule: {csv: …}` path is
    relative to its folder and must lie within it (or within one of `allow_paths`).
    """
    try:
        try:
            spec = GenerateSpec.model_validate(data)
        except ValidationError as exc:
            raise _spec_error(exc) from None
        if isinstance(spec.schedule, ScheduleFile) and spec.schedule.csv is not None:
            try:
                named = named_file(spec.schedule.csv, plan_path, allow_paths)
            except CommlintInputError as exc:
                raise _fail(f"schedule.csv: {exc.error.message}", at="schedule.csv") from None
            spec.schedule.csv = str(named)
        return _generate(spec)
    except CommlintInputError as exc:
        field = getattr(exc, "field", None)
        if plan_path and field and exc.error.line is None:
            where = _locate(plan_path, field)
            if where is not None:
                exc.error.line, exc.error.col = where
        raise


def _generate(spec: GenerateSpec) -> Trace:
    lay = resolve_layout(spec)
    opts = _resolve_options(spec, lay)
    # a few bytes of spec must not expand without bound: check the size of a rank's program
    # before building it and of the whole trace before instantiating it
    per_rank = (spec.microbatches or 2 * lay.pp) * max(1, spec.layers) * lay.vpp
    if per_rank > MAX_GENERATED_ACTIONS:
        raise _fail(
            f"microbatches × layers × vpp is {per_rank}, more than the {MAX_GENERATED_ACTIONS} "
            "actions a generated plan may hold",
            at="microbatches" if spec.microbatches else "layers",
        )
    base_plan = _pipeline(spec, lay, spec.microbatches or max(1, 2 * lay.pp))
    if isinstance(spec.schedule, ScheduleFile):
        given = spec.microbatches
        if given is not None and given != base_plan.microbatches:
            raise _fail(
                f"microbatches is {given} but the schedule CSV runs {base_plan.microbatches}",
                at="microbatches",
            )
    counts = _apply_mutations(spec, lay, opts, base_plan.microbatches)
    if counts and isinstance(spec.schedule, ScheduleFile):
        raise _fail("mutation last_microbatch needs a built-in schedule, not a CSV", at="mutations")
    fuse_all = opts.style == "deepspeed"
    skeletons: dict[tuple[int, int], _Prepared] = {}
    keys: list[tuple[int, int]] = []
    for r in range(lay.world_size):
        pos = _pp_position(lay, r)
        n = counts.get(_dp_index(lay, r), base_plan.microbatches)
        key = (pos, n)
        keys.append(key)
        if key not in skeletons:
            plan = base_plan if n == base_plan.microbatches else _pipeline(spec, lay, n)
            raw = _skeleton(opts, lay, plan, pos, plan.steps[pos], fuse_all)
            skeletons[key] = _prepare(raw)
    total = sum(len(skeletons[key].template) for key in keys)
    if total > MAX_GENERATED_ACTIONS:
        raise _fail(
            f"the plan expands to {total} actions, more than the {MAX_GENERATED_ACTIONS} "
            "commlint generates; check a smaller world size or fewer microbatches",
            at="world_size" if spec.world_size is not None else "degrees",
        )
    place = lay.place
    # each rank's actions are built when first read: the checker reads one rank per orbit
    # of a clean symmetric plan (commlint.plans.lazy)
    ranks = LazyRanks(range(lay.world_size), lambda r: _instantiate(skeletons[keys[r]], place[r]))
    schedule_name = spec.schedule if isinstance(spec.schedule, str) else "csv"
    meta = {
        "generator": "commlint.plans.generate",
        "layout": spec.layout,
        "order": "-".join(lay.order),
        "degrees": {
            "tp": lay.tp,
            "cp": lay.cp,
            "ep": lay.ep,
            "etp": lay.etp,
            "dp_replicate": lay.dp_replicate,
            "dp_shard": lay.dp_shard,
            "pp": lay.pp,
            "vpp": lay.vpp,
        },
        "schedule": schedule_name,
        "microbatches": base_plan.microbatches,
        "p2p": {"style": opts.style, "order": opts.order, "blocking": opts.blocking},
        "mutations": [
            m if isinstance(m, str) else m.model_dump(exclude_none=True) for m in spec.mutations
        ],
    }
    trace = GeneratedTrace.model_construct(
        version=1,
        world_size=lay.world_size,
        groups=lay.groups,
        ranks=ranks,
        ends={},
        backend=spec.backend,
        source="generate",
        meta=meta,
    )
    attach(trace, certify(lay, keys, skeletons, ranks.generated))
    return trace


def generate(
    world_size: int | None = None,
    degrees: dict[str, int] | None = None,
    schedule: str | dict[str, str] = "1f1b",
    microbatches: int | None = None,
    **options: Any,
) -> Trace:
    """Python form of the `generate:` block: `generate(world_size=64, degrees={"tp": 2,
    "pp": 4}, schedule="1f1b", microbatches=8, p2p="batched")` → `Trace`.

    Every other key of the block (layout, order, layers, p2p, collectives, activation,
    seq_lengths, backend, mutations) is a keyword argument. Raises `CommlintInputError`.
    """
    data: dict[str, Any] = {"degrees": degrees or {}, "schedule": schedule, **options}
    if world_size is not None:
        data["world_size"] = world_size
    if microbatches is not None:
        data["microbatches"] = microbatches
    return generate_from_spec(data)


__all__ = [
    "GenerateSpec",
    "Layout",
    "generate",
    "generate_from_spec",
    "orthogonal_groups",
    "resolve_layout",
]
