"""The parallel axes of a generated plan and their groups: Megatron's masked-orthogonal
`RankGenerator` rule or torchtitan's `ParallelDims` mesh, the axis order, expert groups,
and each group's creation order (`Layout`, `resolve_layout`, `orthogonal_groups`).

First stage of `commlint.plans.generate`: spec -> axes -> pipeline skeletons -> ranks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod

from commlint.plans.generate_spec import MAX_GENERATED_WORLD, GenerateSpec, _fail

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
