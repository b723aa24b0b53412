"""One iteration of a generated plan as a skeleton per pipeline position: the schedule
(`commlint.plans.schedules`: GPipe, 1F1B, interleaved, ZB-H1, a pipelining CSV) lowered to
p2p in Megatron's, Megatron-batched, torch pipelining's or DeepSpeed's style, the per-layer
and per-step collectives around it, and the mutations that inject known hangs.

Second stage of `commlint.plans.generate` (after `generate_axes`)."""

from __future__ import annotations

from dataclasses import dataclass

from commlint.findings import CommlintInputError
from commlint.plans import schedules as sch
from commlint.plans.gate import MAX_NAMED_BYTES, read_text
from commlint.plans.generate_axes import Layout
from commlint.plans.generate_spec import P2P, GenerateSpec, Mutation, ScheduleFile, _fail

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
