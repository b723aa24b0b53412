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

The stages, one module each: `generate_spec` (the block, its limits and errors) ->
`generate_axes` (groups along the axes) -> `generate_pipeline` (one skeleton per pipeline
position) -> this module (every rank's actions from its skeleton, the symmetry certificate).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import prod
from typing import Any

from pydantic import ValidationError

from commlint.findings import CommlintInputError
from commlint.graph.symmetry import Symmetry, attach
from commlint.plans.gate import named_file
from commlint.plans.generate_axes import Layout, orthogonal_groups, resolve_layout
from commlint.plans.generate_pipeline import (
    _PP_ON_WORLD,
    SkOp,
    _apply_mutations,
    _pipeline,
    _resolve_options,
    _skeleton,
)
from commlint.plans.generate_spec import (
    MAX_GENERATED_ACTIONS,
    MAX_GENERATED_WORLD,
    GenerateSpec,
    ScheduleFile,
    _fail,
    _locate,
    _spec_error,
)
from commlint.plans.lazy import GeneratedTrace, LazyRanks
from commlint.trace import ACTION_DEFAULTS, Action, SharedAction, Trace, built_action

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
    "MAX_GENERATED_ACTIONS",
    "MAX_GENERATED_WORLD",
    "GenerateSpec",
    "Layout",
    "generate",
    "generate_from_spec",
    "orthogonal_groups",
    "resolve_layout",
]
