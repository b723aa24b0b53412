"""Lowering aligned Flight Recorder entries to a `Trace`: one `Action` per entry (op, group,
peer, sizes, the user's call site, Flight Recorder's sequence id in the label) and each
rank's end where its dump ends.

Last stage of `commlint.plans.importers.flight_recorder` (`dumps_to_trace`, `_to_trace`)."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from commlint.findings import CommlintInputError
from commlint.plans.importers.common import validated
from commlint.plans.importers.flight_recorder_align import _aligned_entries, _p2p_peer
from commlint.plans.importers.flight_recorder_entries import _checked_dump, _Columns, _Entry, _numel
from commlint.plans.importers.flight_recorder_files import MARKERS, OP_NAMES, _Bad, _short
from commlint.plans.importers.flight_recorder_groups import _Groups
from commlint.plans.importers.flight_recorder_payloads import (
    _dtype,
    _Located,
    _payload_findings,
    _total,
)
from commlint.trace import Action, RankEnd, Trace

# --- entries → actions ----------------------------------------------------------------------


class _RankBuilder:
    """One rank's entries → actions: p2p batches become isend/irecv + wait."""

    def __init__(self, rank: int, pgs: _Groups, located: _Located) -> None:
        self.rank, self.pgs, self.located = rank, pgs, located
        self.actions: list[Action] = []
        self.entry_of: array = array("l")
        self.backends: set[str] = set()
        self.unknown: set[str] = set()
        self.stuck: str | None = None
        self.batch_key: tuple[str, int] | None = None
        self.batch_handles: list[str] = []
        self.n_batches = 0
        self.last_coll: tuple[str, int] | None = None
        self.p2p_count: Counter[tuple[str, int]] = Counter()

    def count_p2p(self, entries: list[_Entry]) -> None:
        self.p2p_count = Counter((e.group, e.p2p_seq) for e in entries if e.raw in ("send", "recv"))

    def _append(self, action: Action, e: _Entry | None) -> None:
        if e is not None:
            self.located.action[(self.rank, id(e))] = len(self.actions)
        self.actions.append(action)
        self.entry_of.append(e.index if e is not None else -1)

    def close_batch(self) -> None:
        if self.batch_key is not None and self.batch_handles:
            self._append(Action(op="wait", handles=list(self.batch_handles)), None)
        self.batch_key, self.batch_handles = None, []

    def add(self, e: _Entry) -> None:
        if e.backend:
            self.backends.add(e.backend)
        if e.raw in MARKERS:
            self.close_batch()
            return
        op = OP_NAMES.get(e.raw)
        if op is None:
            self.unknown.add(e.raw)
            return
        group = e.group
        site, stack = self.located.site(self.rank, e)
        shape, dtype = _payload(e)
        common = {"shape": shape, "dtype": dtype, "site": site, "stack": stack or None}
        state = e.state
        if state != "completed" and self.stuck is None:
            self.stuck = f"{op}({group}) {state or 'scheduled'}"
        if op in ("send", "recv"):
            self._add_p2p(e, op, group, state, common)
            return
        self.close_batch()
        if self.last_coll == (group, e.seq) and self.actions and self.actions[-1].group == group:
            _merge(self.actions[-1], shape)  # a coalesced collective: one op per tensor list
            self.located.action[(self.rank, id(e))] = len(self.actions) - 1
            return
        self.last_coll = (group, e.seq)
        root = None
        label = f"{group}#{e.seq} {state}".strip()
        if op in ("broadcast", "reduce", "gather", "scatter"):
            root = self.pgs.of[(self.rank, e.pg)].members[0]
            label += " (root not recorded)"
        self._append(Action(op=op, group=group, root=root, label=label, **common), e)

    def _add_p2p(self, e: _Entry, op: str, group: str, state: str, common: dict) -> None:
        peer = _p2p_peer(e, self.pgs.of[(self.rank, e.pg)].members)
        if peer is None:
            self.unknown.add(f"{e.raw} {e.detail or ''}".strip())
            return
        key = (group, e.p2p_seq)
        label = f"{group} p2p#{e.p2p_seq} {state}".strip()
        if self.p2p_count[key] > 1:  # ops sharing a p2p_seq_id were issued as one batch
            if self.batch_key != key:
                self.close_batch()
                self.batch_key = key
                self.n_batches += 1
            handle = f"b{self.n_batches}.{len(self.batch_handles)}"
            self.batch_handles.append(handle)
            self._append(
                Action(
                    op="isend" if op == "send" else "irecv",
                    group=group,
                    peer=peer,
                    handle=handle,
                    batch=f"b{self.n_batches}",
                    label=label,
                    **common,
                ),
                e,
            )
            return
        self.close_batch()
        self._append(Action(op=op, group=group, peer=peer, label=label, **common), e)


def dumps_to_trace(
    dumps: Mapping[int, dict[str, Any]],
    *,
    groups: Mapping[str, Iterable[int]] | None = None,
    world_size: int | None = None,
    keep_completed: bool = False,
    path: str | None = None,
    files: Mapping[int, str] | None = None,
) -> Trace:
    """Parsed dumps (rank → dump dict) → `Trace`. See the module docstring for the rules."""
    payloads: dict[bytes, tuple] = {}
    checked = {
        rank: _checked_dump(d, (files or {}).get(rank, path), payloads=payloads)
        for rank, d in dumps.items()
    }
    return _to_trace(
        checked,
        groups=groups,
        world_size=world_size,
        keep_completed=keep_completed,
        path=path,
        files=files,
    )


def _to_trace(
    checked: dict[int, tuple[_Columns, dict[str, tuple[str, Any]], Any]],
    *,
    groups: Mapping[str, Iterable[int]] | None,
    world_size: int | None,
    keep_completed: bool,
    path: str | None,
    files: Mapping[int, str] | None,
) -> Trace:
    def where(rank: int) -> str | None:
        return (files or {}).get(rank, path)

    pgs = _Groups(checked, groups, world_size, where)
    per_rank: dict[int, _Columns] = {}
    for rank, (cols, _, _) in checked.items():
        if not 0 <= rank < pgs.world_size:
            raise CommlintInputError(
                f"dump for rank {rank}, but the default group has {pgs.world_size} ranks",
                where(rank),
            )
        names = {pg: inst.trace_name for pg, inst in pgs.by_rank.get(rank, {}).items()}
        cols.group = list(map(names.__getitem__, cols.pg))
        for e in cols.cache.values():
            e.group = names[e.pg]
        per_rank[rank] = cols
    positions, dropped, colls = _aligned_entries(per_rank, pgs, keep_completed)
    kept: dict[int, list[_Entry]] = {}
    for rank, at in positions.items():
        cols = per_rank[rank]
        try:
            cols.fetch(at)  # frames of kept entries that completed here: the dump read once
        except _Bad as exc:
            raise CommlintInputError(f"{exc}", where(rank)) from None
        kept[rank] = [cols.entry(i) for i in at]
    located = _Located(where)
    backends: set[str] = set()
    ranks: dict[int, list[Action]] = {}
    entry_of: dict[int, array] = {}
    stuck: dict[int, str] = {}
    unknown: set[str] = set()
    for rank in sorted(kept):
        builder = _RankBuilder(rank, pgs, located)
        builder.count_p2p(kept[rank])
        for e in kept[rank]:
            builder.add(e)
        builder.close_batch()
        ranks[rank] = builder.actions
        entry_of[rank] = builder.entry_of
        backends |= builder.backends
        unknown |= builder.unknown
        if builder.stuck:
            stuck[rank] = builder.stuck
    members_of = {i.trace_name: i.members for i in pgs.instances.values()}
    findings = _payload_findings(colls, members_of, located)
    # gloo keeps every entry `scheduled`: the states then say nothing about where ranks stop
    states_known = any(
        state not in ("", "scheduled") for c in per_rank.values() for state in set(c.state)
    )
    if not states_known:
        stuck = {}
    ends: dict[int, RankEnd] = {}
    for rank in range(pgs.world_size):
        if rank not in checked:
            ends[rank] = RankEnd(kind="timeout", message="no Flight Recorder dump for this rank")
        else:
            at = stuck.get(rank)
            if not states_known:
                message = "its Flight Recorder dump ends there, entry states not recorded"
            elif at:
                message = f"its Flight Recorder dump ends there, first unfinished entry {at}"
            else:
                message = "its Flight Recorder dump ends there, every entry completed"
            ends[rank] = RankEnd(kind="timeout", message=message)
    backend = sorted(backends)[0] if len(backends) == 1 else None
    meta: dict[str, object] = {
        "flight_recorder": {
            "path": path,
            "files": {r: where(r) for r in sorted(checked)},
            "ranks_with_dumps": sorted(checked),
            "dropped_entries": {r: n for r, n in dropped.items() if n},
            "stuck_at": stuck,
            "states_recorded": states_known,
            "inferred_groups": [],
            "unknown_ops": sorted(unknown),
            "versions": sorted({str(v) for _, _, v in checked.values()}),
            "findings": findings,
            "entry_of": entry_of,
        }
    }
    try:
        trace = _trace(pgs, ranks, ends, backend, meta)
    except ValidationError as exc:  # a value no check above foresaw: still one located line
        raise CommlintInputError(
            f"not a valid trace: {_short(exc).splitlines()[0]}", path
        ) from None
    return validated(trace, path, dict(files) if files else None)


def _trace(pgs: _Groups, ranks: dict, ends: dict, backend: str | None, meta: dict) -> Trace:
    return Trace(
        world_size=pgs.world_size,
        groups=pgs.trace_groups(),
        ranks=ranks,
        ends=ends,
        backend=backend,
        source="flight-recorder",
        meta=meta,
    )


def _payload(e: _Entry) -> tuple[list[int] | None, str | None]:
    dtype = _dtype(e.in_dtypes[0]) if e.in_dtypes else None
    if not e.in_sizes:
        return None, dtype
    if len(e.in_sizes) == 1:
        return list(e.in_sizes[0]), dtype
    return [_total(e.in_sizes)], dtype


def _merge(action: Action, shape: list[int] | None) -> None:
    if shape is None or action.shape is None:
        return
    action.shape = [_numel(action.shape) + _numel(shape)]
