"""Execution graph: a trace lowered to flat arrays, with every communication matched.

Matching is static — it depends on issue order only, never on timing:
- point-to-point: the k-th send on channel (group, src, dst, tag) meets the k-th receive on it
  (non-overtaking, as in MPI);
- collectives: the i-th collective a rank issues on group G meets the i-th collective every
  other member issues on G (the per-group sequence number Flight Recorder uses).

Each match is an *instance*: the set of ops that complete together, and how many ops it needs.
The simulator in `commlint.graph.simulate` only decides which instances complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commlint.trace import (
    ACTION_DEFAULTS,
    ASYNC_P2P_OPS,
    COLLECTIVE_OPS,
    P2P_OPS,
    SEND_OPS,
    WORLD,
    Action,
    Trace,
    built_action,
    normalize_dtype,
)

# Step kinds of a rank's program (ISSUE and BLOCK must stay the two smallest).
ISSUE = 0  # issue an op and go on (async)
BLOCK = 1  # issue an op and wait for it (blocking)
WAIT = 2  # wait for earlier async ops
SYNC = 3  # device synchronisation: wait for every outstanding op (nccl, single-queue)
SKIP = 4  # no communication (a call torch ignores, e.g. by a non-member)
FAIL = 5  # the call raises at once (e.g. a root outside the group)

MODELS = ("gloo", "nccl", "single-queue")

NEVER = 1 << 60  # the `need` of an instance that can never complete
_FR_SEQ = re.compile(r"#(\d+)(?: |$)")  # Flight Recorder labels: `tp#7 scheduled`


@dataclass
class Problem:
    """A finding known from matching alone, before any simulation."""

    code: str
    message: str
    refs: list[tuple[int, int]]  # (rank, action index)
    fix: str = ""
    severity: str = "error"


@dataclass
class Graph:
    """A compiled trace: ops, instances, and per-rank step programs."""

    trace: Trace
    model: str
    # per op (index = op id)
    op_rank: list[int] = field(default_factory=list)
    op_action: list[int] = field(default_factory=list)
    op_inst: list[int] = field(default_factory=list)
    op_async: list[bool] = field(default_factory=list)
    op_prev: list[int] = field(default_factory=list)  # previous op on the same queue, or -1
    op_next: list[int] = field(default_factory=list)
    op_next_extra: dict[int, list[int]] = field(default_factory=dict)  # batch members
    op_fails: list[bool] = field(default_factory=list)  # completes, but its rank raises
    op_waited: list[bool] = field(default_factory=list)
    # per instance
    inst_need: list[int] = field(default_factory=list)
    inst_members: list[list[int]] = field(default_factory=list)
    inst_key: list[tuple] = field(default_factory=list)  # ("coll", group, seq) / ("p2p", …)
    # per group: (seq, refs, acts) of collectives NCCL pairs silently though their ops
    # differ (a barrier with a one-element all_reduce): where the ranks' calls first differ
    barrier_paired: dict[str, list[tuple[int, list, list]]] = field(default_factory=dict)
    # per rank: steps `arg << 3 | kind`; arg is an op id, or an index into `waits`
    steps: dict[int, list[int]] = field(default_factory=dict)
    # under gloo, per rank whose actions come from more than one host thread: the action
    # indices of each thread, the main thread's first (each a program of its own: `simulate`)
    threads: dict[int, list[list[int]]] = field(default_factory=dict)
    waits: list[tuple[int, ...]] = field(default_factory=list)
    to_check: set[int] = field(default_factory=set)  # instances whose members differ
    problems: list[Problem] = field(default_factory=list)
    # instances whose members disagree on op/root: they never complete
    mismatched: set[int] = field(default_factory=set)
    hung_groups: set[str] = field(default_factory=set)


def compile_trace(trace: Trace, model: str = "gloo") -> Graph:
    """Lower a validated trace to a `Graph` under a queue model (one linear pass)."""
    if model not in MODELS:
        raise ValueError(f"unknown queue model {model!r} (expected one of {', '.join(MODELS)})")
    g = Graph(trace, model)
    members = {name: set(r) for name, r in trace.groups.items()}
    members[WORLD] = range(trace.world_size)  # `in` and `len` in O(1), no set of every rank
    sizes = {name: len(m) for name, m in members.items()}
    group_insts: dict[str, list[int]] = {name: [] for name in members}  # seq -> instance
    chan_count: dict[tuple, int] = {}
    p2p_inst: dict[tuple, int] = {}
    op_rank, op_action, op_inst = g.op_rank, g.op_action, g.op_inst
    op_async, op_prev, op_next, op_waited = g.op_async, g.op_prev, g.op_next, g.op_waited
    op_fails = g.op_fails
    inst_need, inst_members, inst_key = g.inst_need, g.inst_members, g.inst_key
    inst_sig: list[tuple] = []
    pending: dict[tuple, list[tuple[int, int]]] = {}  # per-call problems, by call site
    ranks = trace.ranks
    # a lazy `ranks` (generated plans, pipelining schedules) may hold a rank as compact rows
    # (tuples laid out as `CompactRow`): read as they are, without building an `Action` each
    rows_of = getattr(ranks, "compact_rows", None)
    capacity = trace.num_actions()  # ops <= actions; trimmed at the end
    op_next.extend([-1] * capacity)
    op_waited.extend([False] * capacity)
    op_fails.extend([False] * capacity)
    to_check = g.to_check
    nccl_like = model != "gloo"
    # Under gloo each host thread of a rank is a program of its own (`Graph.threads`): a
    # thread blocked in a call does not stop the others, and which of two threads issued
    # first is a race, not an order. Under nccl and single-queue the device runs the rank's
    # communication in the order it was enqueued (the compute stream every synchronous call
    # makes wait; one queue), whatever the thread: the recorded order is that order, one
    # sample of a race whose other outcomes the reordering analysis (CL209) explores.
    host_lanes = model == "gloo"
    # what an action means under this model, worked out once per distinct action object:
    # plans share one frozen object between the ranks and steps that repeat an action
    info_of: dict[int, tuple] = {}
    row_info = {
        op: _action_info(built_action({**ACTION_DEFAULTS, "op": op}, {"op"}), model)
        for op in ("isend", "irecv", "wait")
    }
    for rank in sorted(ranks):
        rows = rows_of(rank) if rows_of is not None else None
        actions = rows if rows is not None else ranks[rank]
        steps: list[int] = []
        handles: dict[str, int] = {}
        seqs: dict[str, int] = {}
        last_on_queue: dict[object, int] = {}
        batch: tuple | None = None  # (name, queue key, op before the batch)
        lanes: dict[str | None, list[int]] | None = None  # thread -> its action indices
        for i, a in enumerate(actions):
            thread = None
            if rows is not None:  # a compact row: its op's meaning, its own handle
                what, op, group, sig, is_async, _, batch_name, qkey = row_info[a[0]]
                handle = a[2]
            else:
                thread = a.thread if host_lanes else None
                if thread is not None or lanes is not None:
                    if lanes is None:
                        lanes = {None: list(range(i))}
                    lanes.setdefault(thread, []).append(i)
                info = info_of.get(id(a))
                if info is None:
                    info = _action_info(a, model)
                    if a.__class__ is not Action:  # shared and frozen (a mutable one is single)
                        info_of[id(a)] = info
                what, op, group, sig, is_async, handle, batch_name, qkey = info
            if what == _WAIT:
                # a handle of a call that was skipped (non-member) or raised is absent: torch
                # gave that rank no work to wait for, and the call has its own finding
                names = a[3] if rows is not None else a.handles
                ops = tuple(handles[h] for h in names if h in handles)
                for o in ops:
                    op_waited[o] = True
                steps.append(len(g.waits) << 3 | WAIT)
                g.waits.append(ops)
                continue
            if what == _SYNC:
                steps.append(SYNC if nccl_like else SKIP)
                continue
            mem = members[group]
            if what == _COLL:
                if rank not in mem:
                    pending.setdefault(("CL205", a.describe(), a.site), []).append((rank, i))
                    steps.append(SKIP)
                    _forget(handles, handle)
                    continue
                if a.root is not None and a.root not in mem:
                    pending.setdefault(("CL208", a.describe(), a.site), []).append((rank, i))
                    steps.append(FAIL)
                    _forget(handles, handle)
                    continue
                seq = seqs.get(group, 0)
                seqs[group] = seq + 1
                ginst = group_insts[group]
                if seq < len(ginst):
                    inst = ginst[seq]
                    first = inst_sig[inst]
                    if op == "all_to_all" or (sig is not first and sig != first):
                        to_check.add(inst)
                else:
                    inst = len(inst_need)
                    ginst.append(inst)
                    inst_need.append(sizes[group])
                    inst_members.append([])
                    inst_key.append(("coll", group, seq))
                    inst_sig.append(sig)
            else:  # p2p
                peer = a[1] if rows is not None else a.peer
                if rank not in mem or peer not in mem:
                    full = ranks[rank][i] if rows is not None else a  # builds this rank
                    key = ("CL205", full.describe(), full.site, rank)
                    pending.setdefault(key, []).append((rank, i))
                    steps.append(SKIP)
                    _forget(handles, handle)
                    continue
                is_send = op in SEND_OPS
                src, dst = (rank, peer) if is_send else (peer, rank)
                tag = a[5] if rows is not None else a.tag
                chan = (group, src, dst, tag, is_send)
                k = chan_count.get(chan, 0)
                chan_count[chan] = k + 1
                pkey = (group, src, dst, tag, k)
                inst = p2p_inst.get(pkey)
                if inst is None:
                    inst = p2p_inst[pkey] = len(inst_need)
                    inst_need.append(2)
                    inst_members.append([])
                    inst_key.append(("p2p", group, src, dst, tag, k))
                    inst_sig.append(sig)
                elif sig != inst_sig[inst]:
                    to_check.add(inst)
                if qkey is _PAIR:  # NCCL: one communicator per peer pair of a group
                    qkey = (group, src, dst) if src < dst else (group, dst, src)
            op_id = len(op_rank)
            op_rank.append(rank)
            op_action.append(i)
            op_inst.append(inst)
            op_async.append(is_async)
            inst_members[inst].append(op_id)
            prev = -1
            if qkey is not None:
                if batch_name is not None and batch is not None and batch[0] == batch_name:
                    qkey, prev = batch[1], batch[2]  # one queue element for the whole batch
                else:
                    prev = last_on_queue.get(qkey, -1)
                    batch = (batch_name, qkey, prev) if batch_name is not None else None
                if prev != -1:
                    if op_next[prev] == -1:
                        op_next[prev] = op_id
                    else:
                        g.op_next_extra.setdefault(prev, []).append(op_id)
                last_on_queue[qkey] = op_id
            op_prev.append(prev)
            if handle is not None and is_async:
                handles[handle] = op_id
            steps.append(op_id << 3 | (ISSUE if is_async else BLOCK))
        g.steps[rank] = steps
        if lanes is not None and len(lanes) > 1:
            g.threads[rank] = [idx for idx in lanes.values() if idx]
    n_ops = len(op_rank)
    del op_next[n_ops:], op_waited[n_ops:], op_fails[n_ops:]
    g.problems.extend(_per_call(trace, pending))
    _check_instances(g)
    return g


_WAIT, _SYNC, _COLL, _P2P = range(4)
_PAIR = ("pair",)  # the queue of a p2p op under nccl: its peer pair's, known per rank


def _action_info(a: Action, model: str) -> tuple:
    """(kind, op, group, signature, is_async, handle, batch, queue key) of an action under a
    model: everything `compile_trace` reads of it that does not depend on the rank."""
    op = a.op
    if op == "wait":
        return (_WAIT, op, None, None, False, None, None, None)
    if op == "sync":
        return (_SYNC, op, None, None, False, None, None, None)
    gloo = model == "gloo"
    if op in COLLECTIVE_OPS:
        sig = (op, a.root, a.reduce_op, a.dtype, a.shape, a.bytes)
        is_async = bool(a.is_async) or (a.handle is not None and a.is_async is None)
        qkey = None if gloo else ("q" if model == "single-queue" else a.group)
        return (_COLL, op, a.group, sig, is_async, a.handle, a.batch, qkey)
    qkey = None if gloo else ("q" if model == "single-queue" else _PAIR)
    sig = (a.dtype, a.shape, a.bytes)
    return (_P2P, op, a.group, sig, op in ASYNC_P2P_OPS, a.handle, a.batch, qkey)


def _forget(handles: dict[str, int], handle: str | None) -> None:
    """A skipped or failing call rebinds its handle name to no work: a later `wait` on that
    name must not wait for an earlier op that happened to use the same name."""
    if handle is not None:
        handles.pop(handle, None)


def _ref(trace: Trace, rank: int, i: int) -> str:
    a = trace.ranks[rank][i]
    site = f" @{a.site}" if a.site else ""
    return f"rank {rank} {a.describe()}{site}"


def _who(refs: list[tuple[int, int]]) -> str:
    ranks = [r for r, _ in refs]
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _non_member(trace: Trace, refs: list[tuple[int, int]]) -> Problem:
    rank, i = refs[0]
    a = trace.ranks[rank][i]
    members = trace.group_ranks(a.group)
    site = f" @{a.site}" if a.site else ""
    if a.op in P2P_OPS and rank in members:
        what = f"peer {a.peer} is not in group '{a.group}' {members}"
    else:
        verb = "is" if len(refs) == 1 else "are"
        what = f"{_who(refs)} {verb} not in group '{a.group}' {members}"
    return Problem(
        "CL205",
        f"{_who(refs)} {a.describe()}{site}: {what}; torch skips the call on a non-member "
        "without an error, so the ranks that expect this communication wait for it forever.",
        refs,
        fix=f"Call it only on members of '{a.group}' (guard with the group's membership), "
        "or pass the group this rank belongs to.",
    )


def _root_outside(trace: Trace, refs: list[tuple[int, int]]) -> Problem:
    rank, i = refs[0]
    a = trace.ranks[rank][i]
    members = trace.group_ranks(a.group)
    site = f" @{a.site}" if a.site else ""
    return Problem(
        "CL208",
        f"{_who(refs)} {a.describe()}{site}: root {a.root} is not a member of group "
        f"'{a.group}' {members}; the call raises at once on "
        f"{'this rank' if len(refs) == 1 else 'these ranks'}.",
        refs,
        fix="Give the root as a global rank that belongs to the group "
        "(e.g. `dist.get_global_rank(group, 0)`), not a rank of another group.",
    )


def _per_call(trace: Trace, pending: dict[tuple, list[tuple[int, int]]]) -> list[Problem]:
    """One problem per call site (op, group, site), naming every rank that makes the call."""
    makers = {"CL205": _non_member, "CL208": _root_outside}
    return [makers[key[0]](trace, refs) for key, refs in pending.items()]


def _coll_signature(a: Action) -> tuple:
    return (a.op, a.root)


def _check_instances(g: Graph) -> None:
    """Compare the members of each instance whose signatures differ (found while compiling)."""
    for inst in sorted(g.to_check):
        mem_ops = g.inst_members[inst]
        kind = g.inst_key[inst][0]
        refs = [(g.op_rank[o], g.op_action[o]) for o in mem_ops]
        acts = [g.trace.ranks[r][i] for r, i in refs]
        if kind == "coll":
            _check_collective(g, inst, mem_ops, refs, acts)
        elif len(acts) == 2:
            _check_p2p(g, mem_ops, refs, acts)


def _nccl_barrier_pairs(acts: list[Action]) -> bool:
    """Under NCCL a barrier is a one-element all_reduce and pairs with one silently."""
    ops = {a.op for a in acts}
    if ops != {"barrier", "all_reduce"}:
        return False
    return all(a.op == "barrier" or a.numel() == 1 for a in acts)


def _check_collective(
    g: Graph, inst: int, mem_ops: list[int], refs: list, acts: list[Action]
) -> None:
    _, group, seq = g.inst_key[inst]
    num = seq_name(seq, acts)
    sigs = {_coll_signature(a) for a in acts}
    if len(sigs) > 1 and g.model == "nccl" and _nccl_barrier_pairs(acts):
        g.barrier_paired.setdefault(group, []).append((seq, refs, acts))
    if len(sigs) > 1 and not (g.model == "nccl" and _nccl_barrier_pairs(acts)):
        g.mismatched.add(inst)
        g.inst_need[inst] = NEVER
        if group in g.hung_groups:
            return  # the group already hangs at an earlier mismatch; this one is never reached
        g.hung_groups.add(group)
        parts = _group_by(refs, acts, lambda a: a.describe())
        first = min(
            (p for p in g.barrier_paired.get(group, ()) if p[0] < seq),
            key=lambda p: p[0],
            default=None,
        )
        before = ""
        if first is not None:
            # The calls differed earlier, where NCCL pairs a barrier with a one-element
            # all_reduce without complaint: that is where the sequences part (a call added
            # or skipped on some rank), and where the finding is located.
            f_seq, f_refs, f_acts = first
            before = (
                f" The ranks' calls on this group first differ at collective "
                f"{seq_name(f_seq, f_acts)}: "
                f"{_group_by(f_refs, f_acts, lambda a: a.describe())} — NCCL pairs a barrier "
                "with a one-element all_reduce silently, so the sequences drift apart there "
                "and fail here."
            )
            refs = [*f_refs, *refs]
        g.problems.append(
            Problem(
                "CL203",
                f"collective {num} on group '{group}' does not match across ranks: {parts}. "
                f"The ranks never meet in one collective: all of them hang.{before}",
                refs,
                fix="Make every member of the group issue the same collective (same op and "
                "root) at this point; look for a collective skipped or added under a rank "
                "condition just before it.",
            )
        )
        return
    red = {
        (a.reduce_op or "sum").lower()
        for a in acts
        if a.op in ("all_reduce", "reduce", "reduce_scatter")
    }
    if len(red) > 1:
        parts = _group_by(refs, acts, lambda a: (a.reduce_op or "sum").lower())
        g.problems.append(
            Problem(
                "CL203",
                f"{acts[0].op} {num} on group '{group}' reduces with different ops: {parts}. "
                "The call completes with a meaningless result.",
                refs,
                fix="Use the same reduce op on every rank.",
            )
        )
    dtypes = {normalize_dtype(a.dtype) for a in acts if a.dtype}
    if len(dtypes) > 1:
        parts = _group_by(refs, acts, lambda a: normalize_dtype(a.dtype) or "?")
        g.problems.append(
            Problem(
                "CL204",
                f"{acts[0].op} {num} on group '{group}' mixes dtypes: {parts}. NCCL reads the "
                "bytes as the wrong type or hangs on the size difference; gloo fails.",
                refs,
                fix="Cast to one dtype on every rank before the collective.",
            )
        )
    if acts[0].op == "all_to_all":
        _check_splits(g, group, seq, mem_ops, refs, acts)
    elif acts[0].op != "barrier":
        per_op = [a.payload_bytes() if a.payload_bytes() is not None else a.numel() for a in acts]
        sizes = set(per_op) - {None}
        if len(sizes) > 1 and len(dtypes) <= 1:
            # a smaller buffer receives more than it posted: gloo aborts that rank
            for op, size in zip(mem_ops, per_op, strict=True):
                g.op_fails[op] = size is not None and size < max(sizes)
            parts = _group_by(refs, acts, _size_text)
            g.problems.append(
                Problem(
                    "CL204",
                    f"{acts[0].op} {num} on group '{group}' has different sizes: {parts}. "
                    "NCCL hangs or reads past the buffer; gloo fails or corrupts data.",
                    refs,
                    fix="Give every rank a tensor of the same shape (pad the last batch, or "
                    "exchange sizes first).",
                )
            )
        elif len({tuple(a.shape) for a in acts if a.shape is not None}) > 1:
            parts = _group_by(refs, acts, _size_text)
            g.problems.append(
                Problem(
                    "CL204",
                    f"{acts[0].op} {num} on group '{group}' pairs tensors of different shapes "
                    f"(same size): {parts}. The call completes, silently combining different "
                    "tensors — usually two collectives issued in different orders on some ranks.",
                    refs,
                    fix="Issue the collectives of this group in the same order on every rank.",
                )
            )


def seq_name(seq: int, acts: list[Action]) -> str:
    """A collective's number as users see it: `#N` counts from 1, as Flight Recorder's
    `collective_seq_id` and NCCL's logs do (the first collective on a group is `#1`).

    The Flight Recorder importer labels each action `GROUP#ID STATE` with the dump's own id,
    which differs from the position when completed entries were left out: then both are
    given, `#3 (Flight Recorder seq 7)`.
    """
    name = f"#{seq + 1}"
    ids = sorted({fr for a in acts if (fr := _fr_seq(a)) is not None})
    if ids and ids != [seq + 1]:
        name += f" (Flight Recorder seq {', '.join(map(str, ids))})"
    return name


def _fr_seq(a: Action) -> int | None:
    if not a.label or not a.label.startswith(f"{a.group}#"):
        return None
    m = _FR_SEQ.match(a.label, len(a.group))
    return int(m.group(1)) if m else None


def _size_text(a: Action) -> str:
    if a.shape is not None:
        return f"shape {a.shape}"
    return f"{a.payload_bytes()} bytes"


def _check_splits(
    g: Graph, group: str, seq: int, mem_ops: list[int], refs: list, acts: list[Action]
) -> None:
    num = seq_name(seq, acts)
    members = g.trace.group_ranks(group)
    by_rank = {r: a for (r, _), a in zip(refs, acts, strict=True)}
    op_of = {r: op for (r, _), op in zip(refs, mem_ops, strict=True)}
    if len(by_rank) != len(members):
        return
    bad = []
    for i, ri in enumerate(members):
        for j, rj in enumerate(members):
            sent = by_rank[ri].in_splits
            got = by_rank[rj].out_splits
            if sent is None or got is None:
                continue
            if sent[j] > got[i]:
                g.op_fails[op_of[rj]] = True  # receives more than it posted: gloo aborts it
            if sent[j] != got[i]:
                bad.append(f"rank {ri} sends {sent[j]} to rank {rj}, which expects {got[i]}")
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        g.problems.append(
            Problem(
                "CL204",
                f"all_to_all {num} on group '{group}' has inconsistent splits: "
                + "; ".join(bad[:3])
                + more
                + ". NCCL hangs waiting for bytes never sent; gloo fails or corrupts data.",
                refs,
                fix="Exchange the split sizes first (an all_to_all of the counts) and derive "
                "out_splits from what the peers will send.",
            )
        )


def _check_p2p(g: Graph, mem_ops: list[int], refs: list, acts: list[Action]) -> None:
    send_i = 0 if acts[0].op in SEND_OPS else 1
    recv_i = 1 - send_i
    s, r = acts[send_i], acts[recv_i]
    sb, rb = s.payload_bytes(), r.payload_bytes()
    if sb is None or rb is None:
        sb, rb = s.numel(), r.numel()
    size_differs = sb is not None and rb is not None and sb != rb
    dtype_differs = bool(s.dtype and r.dtype) and normalize_dtype(s.dtype) != normalize_dtype(
        r.dtype
    )
    if not (size_differs or dtype_differs):
        return
    (sr, si), (rr, ri) = refs[send_i], refs[recv_i]
    trace = g.trace
    if size_differs and sb > rb:
        g.op_fails[mem_ops[recv_i]] = True
        effect = (
            f"the receiver gets more than it posted: gloo aborts rank {rr}, NCCL truncates or hangs"
        )
    else:
        effect = "the receiver expects a different payload: NCCL hangs, gloo corrupts data"
    g.problems.append(
        Problem(
            "CL204",
            f"{_ref(trace, sr, si)} sends {_size_text(s)}{' ' + s.dtype if s.dtype else ''} "
            f"but {_ref(trace, rr, ri)} receives {_size_text(r)}"
            f"{' ' + r.dtype if r.dtype else ''}: {effect}.",
            [refs[send_i], refs[recv_i]],
            fix="Send and receive tensors of the same shape and dtype; exchange the shape "
            "first when it varies.",
        )
    )


def _group_by(refs: list, acts: list[Action], key) -> str:
    groups: dict[str, list[str]] = {}
    for (rank, _), a in zip(refs, acts, strict=True):
        site = f" @{a.site}" if a.site else ""
        groups.setdefault(key(a), []).append(f"{rank}{site}" if len(refs) <= 4 else str(rank))
    return "; ".join(
        f"{k} on rank{'s' if len(v) > 1 else ''} {', '.join(v)}" for k, v in groups.items()
    )
