"""`torch.distributed.pipelining` schedule CSVs → `Trace`.

The CSV is what `PipelineScheduleMulti._dump_csv` / `_PipelineScheduleRuntime._dump_csv` write
and `_load_csv` reads: row *i* is pipeline rank *i*, one action per cell (`2F0`, `1RECV_F3`,
`0SEND_B1`, `3UNSHARD`, `(0F1;1B0)OVERLAP_F_B`), an empty cell is idle.

- `compute_only` (no SEND/RECV cells) is lowered to communication exactly as torch's
  `_add_send_recv` does it: ranks are visited round-robin in rank order; a rank schedules its
  next compute action once its input is there (its own RECV was placed, or it computes the
  previous stage itself); an F of a stage whose next stage lives on another rank is followed by
  its SEND_F, and the peer gets the matching RECV_F at that point (B/I symmetrically, towards
  the previous stage).
- `compute_comms` is taken as written.

Then, as `_PipelineScheduleRuntime._step_microbatches` runs it: SEND_* is an `isend` whose
handle is waited at the end of the step; RECV_* is an `irecv` waited right before the compute
action that consumes it (F for RECV_F, I or B for RECV_B). A compute action whose input comes
from another rank and whose RECV was not posted earlier in its row is what the runtime rejects
("Computing action before receiving input"): an input error naming the row and column. Stages
are placed on ranks as `_validate_schedule` infers them: from the row that computes them.
UNSHARD / RESHARD / REDUCE_GRAD are FSDP collectives on a data-parallel group the CSV does not
describe: they are counted in `meta`, not checked.

Sizes come from the file: every stage `0…S` must be computed by some cell, so a stage index (or
a microbatch index) beyond the number of cells the file holds is a located error, and memory
stays proportional to the file (a 24-byte CSV naming stage 10⁹ once asked for 22.8 GB).
Speed (`bench/pipelining.py`): a compute-only CSV is read, lowered and turned into the trace in
one pass over the cells and one round-robin, whose output is each rank's trace as compact rows
(plain tuples, `commlint.trace.CompactRow`) that the checker reads as they are; `Action`s are
built only for a rank something reads (`trace.ranks[r]`: a finding's sites, a saved trace).
A row of at most 3 stages gets its FSDP steps without the prefetch window. Import + lowering
of pp=16 x 256 microbatches costs about 0.9x torch's `_add_send_recv` alone (which neither
parses nor places the FSDP steps).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Container, Iterable
from pathlib import Path
from typing import NamedTuple

from commlint.findings import CommlintInputError
from commlint.gc_pause import paused_gc
from commlint.plans.gate import read_text
from commlint.plans.lazy import GeneratedTrace, LazyRanks
from commlint.trace import ACTION_DEFAULTS, Action, Trace, built_action

_KINDS = "F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B"
_ACTION = re.compile(rf"(\d+)({_KINDS})(\d*)")
_OVERLAP = re.compile(r"\((.*)\)OVERLAP_F_B")
# More digits than this cannot be an index of anything a file holds (the bound check below
# then names the cell); it also keeps int() away from huge digit strings.
_MAX_DIGITS = 12
_INTS = {str(i): i for i in range(4096)}  # digit strings of the common indices
COMPUTE = frozenset({"F", "I", "B", "W"})
COMMS = frozenset({"SEND_F", "RECV_F", "SEND_B", "RECV_B"})
FSDP = frozenset({"UNSHARD", "RESHARD", "REDUCE_GRAD"})
_OWNS = COMPUTE | FSDP  # kinds that place a stage on the row's rank


class PipeAction(NamedTuple):
    """One cell: `stage` `kind` `microbatch` (`2F0`); `parts` for OVERLAP_F_B.

    A tuple, so that `(stage, kind, mb, None)` finds it in a set (the lowering's checks)."""

    stage: int
    kind: str
    mb: int | None = None
    parts: tuple[PipeAction, ...] | None = None

    def __str__(self) -> str:
        if self.parts is not None:
            return f"({';'.join(str(p) for p in self.parts)})OVERLAP_F_B"
        return f"{self.stage}{self.kind}{'' if self.mb is None else self.mb}"


class _IndexTooLarge(ValueError):
    pass


def parse_action(text: str) -> PipeAction | None:
    """`2F0` → PipeAction(2, "F", 0); empty → None. Raises ValueError on anything else."""
    text = text.strip()
    if not text or text == "None":
        return None
    m = _ACTION.fullmatch(text)
    if m is None:
        o = _OVERLAP.fullmatch(text)
        if o:
            parts = tuple(p for p in (parse_action(s) for s in o.group(1).split(";")) if p)
            return PipeAction(-1, "OVERLAP_F_B", None, parts)
        raise ValueError(
            f"invalid action {text!r}: expected [stage][type][microbatch] such as 2F0, "
            "1RECV_F3, 0UNSHARD"
        )
    stage, kind, mb = m.groups()
    if len(stage) > _MAX_DIGITS or len(mb) > _MAX_DIGITS:
        raise _IndexTooLarge(
            f"{text[:40]}{'…' if len(text) > 40 else ''}: index of {max(len(stage), len(mb))} "
            "digits"
        )
    return PipeAction(int(stage), kind, int(mb) if mb else None)


def _flat(a: PipeAction) -> tuple[PipeAction, ...]:
    return a.parts if a.parts is not None else (a,)


def _bound_error(path: str | None, rank: int, col: int, what: str) -> CommlintInputError:
    return CommlintInputError(
        f"rank {rank} (row {rank + 1}), column {col + 1}: {what} is beyond what the file "
        "holds (every stage and microbatch below an index needs action cells of its own)",
        path,
        rank + 1,
    )


def read_csv(text: str, path: str | None = None) -> dict[int, list[PipeAction | None]]:
    """Rows of a schedule CSV; errors name the row (rank) and column.

    Stage and microbatch indices are bounded by the number of action cells in the file: stages
    `0…s` must each be computed by some cell, and a microbatch index beyond every cell cannot
    be a schedule's either."""
    return _read(text, path)[0]


class _Seen(NamedTuple):
    """What reading a CSV saw besides its rows: the first SEND/RECV cell (rank, column,
    cell), or None for a compute-only schedule, the largest microbatch index, and the rank of
    each stage's first owning cell when the file has only single actions (else None:
    `stage_ranks` works it out)."""

    comms_at: tuple[int, int, PipeAction] | None
    top_mb: int
    owner: dict[int, int] | None


def _rows(text: str, path: str | None) -> Iterable[list[str]]:
    """The CSV's rows; a row the csv module refuses (a cell past its field limit, a NUL) is
    a located error naming the row (= rank), never an unlocated `csv.Error`."""
    reader = csv.reader(io.StringIO(text))
    try:
        yield from reader
    except csv.Error as exc:
        why = str(exc).split(" (")[0]
        raise CommlintInputError(
            f"row {reader.line_num}: not readable as CSV ({why})", path, reader.line_num
        ) from None


def _read(text: str, path: str | None) -> tuple[dict[int, list[PipeAction | None]], _Seen]:
    rows: dict[int, list[PipeAction | None]] = {}
    simple = _ACTION.fullmatch
    new = tuple.__new__
    comms = COMMS
    cells_total = 0
    top_stage = top_mb = -1
    comms_at: tuple[int, int, PipeAction] | None = None
    owner: dict[int, int] | None = {}
    owns = _OWNS
    ints = _INTS
    for rank, row in enumerate(_rows(text, path)):
        cells: list[PipeAction | None] = []
        append = cells.append
        for col, cell in enumerate(row):
            m = simple(cell)
            if m is not None and len(cell) < _MAX_DIGITS:  # the common cell, parsed inline
                st, kind, mb = m.groups()
                stage = ints.get(st)
                if stage is None:
                    stage = int(st)
                if stage > top_stage:
                    top_stage = stage
                if mb:
                    b = ints.get(mb)
                    if b is None:
                        b = int(mb)
                    if b > top_mb:
                        top_mb = b
                else:
                    b = None
                a = new(PipeAction, (stage, kind, b, None))
                cells_total += 1
                if kind in owns:
                    if owner is not None and owner.setdefault(stage, rank) != rank:
                        owner = None  # stage_ranks names the conflict, after the reading
                elif comms_at is None and kind in comms:
                    comms_at = (rank, col, a)
                append(a)
                continue
            try:
                a = parse_action(cell)
            except _IndexTooLarge as exc:
                raise _bound_error(path, rank, col, str(exc)) from None
            except ValueError as exc:
                raise CommlintInputError(
                    f"rank {rank} (row {rank + 1}), column {col + 1}: {exc}", path, rank + 1
                ) from None
            if a is not None:
                owner = None  # stage_ranks reads overlap actions' parts
                for part in _flat(a):
                    cells_total += 1
                    top_stage = max(top_stage, part.stage)
                    if part.mb is not None and part.mb > top_mb:
                        top_mb = part.mb
                    if comms_at is None and part.kind in comms:
                        comms_at = (rank, col, a)
            append(a)
        rows[rank] = cells
    if not rows:
        raise CommlintInputError("empty schedule CSV", path)
    # stages 0…s need s+1 cells; a near miss gets stage_ranks' list of the stages never
    # computed, an index far beyond the file is refused here before anything is sized by it
    top = max(top_stage, top_mb)
    if top > 2 * cells_total + 8:
        rank, col, a = next(
            (rank, col, part)
            for rank, cells in rows.items()
            for col, cell in enumerate(cells)
            if cell is not None
            for part in _flat(cell)
            if part.stage == top or part.mb == top
        )
        which = f"stage {a.stage}" if a.stage == top else f"microbatch {a.mb}"
        what = f"{which} ({a}), with {cells_total} action cells in the file,"
        raise _bound_error(path, rank, col, what)
    return rows, _Seen(comms_at, top_mb, owner)


def _scan(rows: dict[int, list[PipeAction | None]]) -> _Seen:
    """`_Seen` of rows given without their text."""
    comms_at, top_mb = None, -1
    for rank, cells in rows.items():
        for col, cell in enumerate(cells):
            if cell is None:
                continue
            for a in cell.parts if cell.parts is not None else (cell,):
                if comms_at is None and a.kind in COMMS:
                    comms_at = (rank, col, cell)
                if a.mb is not None and a.mb > top_mb:
                    top_mb = a.mb
    return _Seen(comms_at, top_mb, None)


def stage_ranks(rows: dict[int, list[PipeAction | None]], path: str | None = None) -> dict:
    """Stage → rank, from the rows that compute each stage (as `_validate_schedule`)."""
    owner: dict[int, int] = {}
    for rank, cells in rows.items():
        for cell in cells:
            if cell is None:
                continue
            for a in _flat(cell):
                if a.kind not in _OWNS:
                    continue
                if owner.setdefault(a.stage, rank) != rank:
                    raise CommlintInputError(
                        f"stage {a.stage} is computed on ranks {owner[a.stage]} and {rank}; "
                        "a stage lives on one rank",
                        path,
                        rank + 1,
                    )
    if not owner:
        raise CommlintInputError("no compute actions (F/B/I/W) in the schedule", path)
    if len(owner) != max(owner) + 1:  # read_csv bounded max(owner) by the file's size
        missing = sorted(set(range(max(owner) + 1)) - set(owner))
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise CommlintInputError(
            f"stages {missing[:10]}{more} are never computed by any rank", path
        )
    return owner


def _add_fsdp_steps(cells: list[PipeAction | None], n_microbatches: int) -> list[PipeAction]:
    """UNSHARD/RESHARD (prefetch of the next 3 stages) and REDUCE_GRAD after a stage's last
    backward, as torch's `_add_unshard_reshard` and `_add_reduce_grad` insert them. They carry
    no p2p, but they take turns in the round-robin lowering, so they decide where peers'
    RECVs land.

    torch scans the rest of the row from every action for the next 3 distinct stages (its
    cost grows with the square of the row when a rank holds fewer than 3 stages). The same
    window is kept here from the end of the row backwards: the stages in order of their next
    use form a move-to-front list, whose first entries are that window.

    A row of at most 3 stages and no overlap actions (every interleaved or V schedule with 2
    stages per rank) needs no window: it holds every stage still to be used, so the row
    opens with an UNSHARD of each (in order of first use), a stage is resharded right after
    its last use, and the row closes with a RESHARD of the stage used last."""
    actions = [a for a in cells if a is not None]
    n = len(actions)
    overlaps = any(a.parts is not None for a in actions)
    if not overlaps:
        last_use = {a.stage: i for i, a in enumerate(actions)}
        if len(last_use) <= 3:
            return _few_stages(actions, last_use, n_microbatches)
    windows: list[list[int]] = [[]] * n
    order: list[int] = []  # stages by next use from position i on
    first: dict[int, tuple[int, bool]] = {}  # stage -> (action index of next use, overlap?)
    for i in range(n - 1, -1, -1):
        a = actions[i]
        overlap = a.parts is not None
        for part in reversed(_flat(a)):
            if part.stage in first:
                order.remove(part.stage)
            order.insert(0, part.stage)
            first[part.stage] = (i, overlap)
        if not overlaps:  # the common row: the window is the three stages used next
            windows[i] = order[:3]
            continue
        # torch's next_stage_indices(3, actions[i:]): a regular action stops the scan when the
        # third stage appears; an overlap action adds all its stages, then stops at >= 3
        window: list[int] = []
        k = 0
        while k < len(order):
            j, is_overlap = first[order[k]]
            if is_overlap:
                while k < len(order) and first[order[k]][0] == j:
                    window.append(order[k])
                    k += 1
                if len(window) >= 3:
                    break
            else:
                window.append(order[k])
                k += 1
                if len(window) == 3:
                    break
        windows[i] = window
    out: list[PipeAction] = []
    active: list[int] = []
    for a, upcoming in zip(actions, windows, strict=True):
        if upcoming == active or (len(upcoming) == len(active) and set(upcoming).issubset(active)):
            out.append(a)  # the window did not move: nothing to fetch or evict
            continue
        evict = sorted(s for s in active if s not in upcoming)
        for st in evict:
            active.remove(st)
            out.append(PipeAction(st, "RESHARD"))
        for st in upcoming:
            if st not in active:
                active.append(st)
                out.append(PipeAction(st, "UNSHARD"))
        out.append(a)
    for st in sorted(active):
        out.append(PipeAction(st, "RESHARD"))
    return _reduce_grads(out, n_microbatches)


def _few_stages(
    actions: list[PipeAction], last_use: dict[int, int], n_microbatches: int
) -> list[PipeAction]:
    """`_add_fsdp_steps` of a row of single actions on at most 3 stages."""
    first_use = dict.fromkeys(a.stage for a in actions)  # in order of first use
    out = [PipeAction(st, "UNSHARD") for st in first_use]
    append = out.append
    backwards = dict.fromkeys(first_use, 0)
    done = None  # the stage whose last use was the previous action
    for i, a in enumerate(actions):
        if done is not None:
            append(PipeAction(done, "RESHARD"))
        append(a)
        stage, kind = a.stage, a.kind
        if kind == "B" or kind == "W":
            backwards[stage] += 1
            if backwards[stage] == n_microbatches:
                append(PipeAction(stage, "REDUCE_GRAD"))
        done = stage if last_use[stage] == i else None
    if done is not None:
        append(PipeAction(done, "RESHARD"))
    return out


def _reduce_grads(out: list[PipeAction], n_microbatches: int) -> list[PipeAction]:
    """REDUCE_GRAD after a stage's n-th backward (B or W), as torch's `_add_reduce_grad`."""
    with_grad: list[PipeAction] = []
    backwards: dict[int, int] = {}
    for a in out:
        with_grad.append(a)
        for part in a.parts if a.parts is not None else (a,):
            if part.kind == "W" or part.kind == "B":
                count = backwards[part.stage] = backwards.get(part.stage, 0) + 1
                if count == n_microbatches:
                    with_grad.append(PipeAction(part.stage, "REDUCE_GRAD"))
    return with_grad


def lower_compute_only(
    rows: dict[int, list[PipeAction | None]],
    path: str | None = None,
    n_microbatches: int | None = None,
    owner: dict[int, int] | None = None,
) -> dict[int, list[PipeAction]]:
    """Lower a compute-only schedule the way torch's `_prepare_schedule_with_comms` does:
    FSDP steps first, then SEND/RECV in the order of `_add_send_recv`. `owner` is
    `stage_ranks(rows)` when the caller has it."""
    return _lower(rows, path, n_microbatches, owner, compact=False)[0]


def _lower(
    rows: dict[int, list[PipeAction | None]],
    path: str | None,
    n_microbatches: int | None,
    owner: dict[int, int] | None,
    compact: bool,
    seen_in_file: _Seen | None = None,
) -> tuple[dict[int, list], int]:
    """The lowering, and the number of FSDP steps it placed. `compact`: each rank's list is
    its trace as compact rows (`to_trace` of the lowered schedule, made in the same pass:
    an isend where the sender computes, the peer's irecv at that point, a wait right before
    the compute that consumes a receive, the step's closing wait); otherwise the lowered
    `PipeAction`s, FSDP steps included, as torch lists them."""
    if owner is None:
        owner = stage_ranks(rows, path)
    if seen_in_file is None:
        seen_in_file = _scan(rows)
    if seen_in_file.comms_at is not None:
        rank, col, cell = seen_in_file.comms_at
        raise CommlintInputError(
            f"rank {rank}, column {col + 1}: {cell} in a compute_only schedule "
            "(use --input-format pipelining-csv with a compute_comms CSV as written)",
            path,
            rank + 1,
        )
    if n_microbatches is None:
        n_microbatches = seen_in_file.top_mb + 1
    num_stages = max(owner) + 1
    last = num_stages - 1

    def ready(a: PipeAction, seen: set, box: Container) -> bool:
        kind, stage = a.kind, a.stage
        if kind == "F":
            return (
                stage == 0
                or (stage, "RECV_F", a.mb, None) in box
                or (stage - 1, "F", a.mb, None) in seen
            )
        if kind == "I" or kind == "B":
            return (
                stage == last
                or (stage, "RECV_B", a.mb, None) in box
                or (stage + 1, "I", a.mb, None) in seen
                or (stage + 1, "B", a.mb, None) in seen
            )
        return True

    # what an F / I / B of each stage sends, and to whom (None: the neighbour is local)
    new = tuple.__new__
    fwd_to = [
        None if s == last or owner[s + 1] == owner[s] else owner[s + 1] for s in range(num_stages)
    ]
    bwd_to = [
        None if s == 0 or owner[s - 1] == owner[s] else owner[s - 1] for s in range(num_stages)
    ]
    todo = {r: _add_fsdp_steps(cells, n_microbatches) for r, cells in rows.items()}
    out: dict[int, list] = {r: [] for r in rows}
    seen: dict[int, set] = {r: set() for r in rows}
    # compact: the receives each rank posted and has not consumed, and the sends it posted
    posted: dict[int, dict[tuple, PipeAction]] = {r: {} for r in rows}
    sent: dict[int, list[PipeAction]] = {r: [] for r in rows}
    # where a rank finds the receives it got: `seen` as torch keeps them, or (compact) the
    # posted ones (a receive is consumed by the one action that checks for it)
    got: dict[int, Container] = posted if compact else seen
    fsdp = 0
    pos = dict.fromkeys(rows, 0)
    ends = {r: len(cells) for r, cells in todo.items()}
    pending = sorted(r for r, cells in todo.items() if cells)
    while pending:
        progress = finished = False
        for rank in pending:
            action = todo[rank][pos[rank]]
            mine = seen[rank]
            if action.parts is None:
                stage, kind, mb, _ = action
                # torch's _ready_to_schedule, inline for the common single action; `key` is
                # the receive it may consume
                if kind == "F":
                    key = (stage, "RECV_F", mb, None)
                    if not (stage == 0 or key in got[rank] or (stage - 1, "F", mb, None) in mine):
                        continue
                elif kind == "B" or kind == "I":
                    key = (stage, "RECV_B", mb, None)
                    if not (
                        stage == last
                        or key in got[rank]
                        or (stage + 1, "I", mb, None) in mine
                        or (stage + 1, "B", mb, None) in mine
                    ):
                        continue
                else:  # W and the FSDP steps: always ready, they only take their turn
                    at = pos[rank] = pos[rank] + 1
                    finished |= at == ends[rank]
                    progress = True
                    fsdp += kind in FSDP
                    if not compact:
                        out[rank].append(action)
                    continue
                parts: tuple[PipeAction, ...] = (action,)
                if compact:  # a receive this action consumes is waited for right before it
                    h = posted[rank].pop(key, None)
                    if h is not None:
                        out[rank].append(("wait", None, None, (h,), action, 0))
            else:
                parts = action.parts
                if not all(ready(a, mine, got[rank]) for a in parts):
                    continue
                if compact:
                    box = posted[rank]
                    for a in parts:
                        stage, kind, mb, _ = a
                        if kind == "F" or kind == "I" or kind == "B":
                            key = (stage, "RECV_F" if kind == "F" else "RECV_B", mb, None)
                            h = box.pop(key, None)
                            if h is not None:
                                out[rank].append(("wait", None, None, (h,), a, 0))
            at = pos[rank] = pos[rank] + 1
            finished |= at == ends[rank]
            progress = True
            mine_out = out[rank]
            if not compact:
                mine_out.append(action)
            for a in parts:
                mine.add(a)
                stage, kind, mb, _ = a
                if kind == "F":
                    peer = fwd_to[stage]
                    if peer is None:
                        continue
                    send = new(PipeAction, (stage, "SEND_F", mb, None))
                    recv = new(PipeAction, (stage + 1, "RECV_F", mb, None))
                elif kind == "I" or kind == "B":
                    peer = bwd_to[stage]
                    if peer is None:
                        continue
                    send = new(PipeAction, (stage, "SEND_B", mb, None))
                    recv = new(PipeAction, (stage - 1, "RECV_B", mb, None))
                else:  # W (single actions of other kinds took their turn above)
                    continue
                if compact:  # the lowered actions are the handles (see `_build_rank`)
                    sent[rank].append(send)
                    mine_out.append(("isend", peer, send, (), None, 0))
                    posted[peer][recv] = recv
                    out[peer].append(("irecv", rank, recv, (), None, 0))
                else:
                    seen[peer].add(recv)
                    mine_out.append(send)
                    mine.add(send)
                    out[peer].append(recv)
        if not progress:
            stuck = ", ".join(f"rank {r} at {todo[r][pos[r]]}" for r in pending)
            raise CommlintInputError(
                f"the compute-only schedule cannot be lowered (torch raises 'Malformed compute "
                f"schedule'): no rank can take its next action — {stuck}; each waits for an "
                "input that no earlier action produces",
                path,
            )
        if finished:
            pending = [r for r in pending if pos[r] < ends[r]]
    if compact:
        for rank, acts in out.items():
            if sent[rank] or posted[rank]:
                handles = (*sent[rank], *posted[rank].values())
                acts.append(("wait", None, None, handles, END_OF_STEP, 0))
    return out, fsdp


# Ranks are kept as compact rows (tuples laid out as `commlint.trace.CompactRow`, one per
# action) in a lazy `ranks` dict: the checker reads the rows; reading `trace.ranks[r]` builds
# rank r's `Action`s from them, without pydantic's validation (every field is valid by
# construction: peers are other ranks of the schedule, waits name handles posted before them;
# tests assert it).
_P2P_SET = frozenset({"op", "peer", "handle", "label", "site"})
_WAIT_SET = frozenset({"op", "handles", "label", "site"})
_END_SET = frozenset({"op", "handles", "label"})
END_OF_STEP = "end of step"


def _build_rank(rows: list[tuple], site: str | None) -> list[Action]:
    """A rank's actions from its compact rows, whose handles are the lowered `PipeAction`s
    (`2SEND_F0`, `3RECV_F0`: the handle and label of the isend/irecv) and whose wait labels
    are the compute action the wait comes before (`before 3F0`) or `END_OF_STEP`. p2p and
    waits are sited at the rank's row of the CSV, the closing wait of the step is not."""
    defaults = ACTION_DEFAULTS
    acts: list[Action] = []
    for op, peer, handle, handles, label, _ in rows:
        data = defaults.copy()
        data["op"] = op
        if op != "wait":
            data["handle"] = data["label"] = str(handle)
            data["peer"], data["site"] = peer, site
            fields_set = _P2P_SET
        elif label == END_OF_STEP:
            data["handles"], data["label"] = [str(h) for h in handles], label
            fields_set = _END_SET
        else:
            data["handles"], data["label"] = [str(h) for h in handles], f"before {label}"
            data["site"], fields_set = site, _WAIT_SET
        acts.append(built_action(data, set(fields_set)))
    return acts


def to_trace(
    schedule: dict[int, list[PipeAction | None]],
    owner: dict[int, int],
    path: str | None = None,
    fmt: str = "compute_comms",
) -> Trace:
    """A lowered schedule → per-rank isend/irecv/wait actions (compact rows, built lazily)."""
    last = max(owner)
    compact: dict[int, list[tuple]] = {}
    fsdp = 0
    for rank, cells in schedule.items():
        rows: list[tuple] = []
        append = rows.append
        pending_recv: dict[tuple[str, int, int | None], PipeAction] = {}
        sends: list[PipeAction] = []
        for col, cell in enumerate(cells):
            if cell is None:
                continue
            for a in cell.parts if cell.parts is not None else (cell,):
                stage, kind, mb, _ = a
                if kind == "F" or kind == "I" or kind == "B":
                    forward = kind == "F"
                    h = pending_recv.pop(("F" if forward else "B", stage, mb), None)
                    if h is not None:
                        append(("wait", None, None, (h,), a, 0))
                    elif _needs_input(owner, last, rank, stage, forward):
                        raise _before_input(a, rank, col, path)
                elif kind == "SEND_F" or kind == "SEND_B":
                    to = stage + 1 if kind == "SEND_F" else stage - 1
                    peer = owner.get(to, rank)
                    if peer == rank:
                        peer = _peer(owner, to, a, rank, path)
                    sends.append(a)
                    append(("isend", peer, a, (), None, 0))
                elif kind == "RECV_F" or kind == "RECV_B":
                    to = stage - 1 if kind == "RECV_F" else stage + 1
                    peer = owner.get(to, rank)
                    if peer == rank:
                        peer = _peer(owner, to, a, rank, path)
                    key = ("F" if kind == "RECV_F" else "B", stage, mb)
                    if key in pending_recv:
                        raise CommlintInputError(
                            f"rank {rank}, column {col + 1}: {a} posted twice before its "
                            "compute (torch: 'Recv twice ... without executing')",
                            path,
                            rank + 1,
                        )
                    pending_recv[key] = a
                    append(("irecv", peer, a, (), None, 0))
                elif kind in FSDP:
                    fsdp += 1
        if sends or pending_recv:
            handles = (*sends, *pending_recv.values())
            append(("wait", None, None, handles, END_OF_STEP, 0))
        compact[rank] = rows
    return _packed_trace(compact, owner, path, fmt, fsdp)


def _packed_trace(
    compact: dict[int, list[tuple]],
    owner: dict[int, int],
    path: str | None,
    fmt: str,
    fsdp: int,
) -> Trace:
    """The trace of compact rows: each rank's `Action`s are built when first read."""

    def build(rank: int) -> list[Action]:
        return _build_rank(compact[rank], f"{path}:{rank + 1}" if path else None)

    return GeneratedTrace.model_construct(
        version=1,
        world_size=max([*compact, *owner.values()]) + 1,
        groups={},
        ranks=LazyRanks(compact, build, compact),
        ends={},
        backend=None,
        source=f"pipelining-csv ({fmt})",
        meta={
            "pipelining": {
                "format": fmt,
                "stage_to_rank": {str(s): r for s, r in sorted(owner.items())},
                "fsdp_actions_not_checked": fsdp,
            }
        },
    )


def _needs_input(owner: dict[int, int], last: int, rank: int, stage: int, forward: bool) -> bool:
    """Does torch's runtime expect a posted RECV before this compute action? (F: unless the
    stage is first or the previous stage is on this rank; I/B: unless it is last or the next
    stage is on this rank — its "V-schedule special case".)"""
    if forward:
        return stage != 0 and owner.get(stage - 1) != rank
    return stage != last and owner.get(stage + 1) != rank


def _before_input(a: PipeAction, rank: int, col: int, path: str | None) -> CommlintInputError:
    recv = f"{a.stage}{'RECV_F' if a.kind == 'F' else 'RECV_B'}{a.mb}"
    said = "Computing" if a.kind == "F" else "Attempted to run compute"
    return CommlintInputError(
        f"rank {rank} (row {rank + 1}), column {col + 1}: {a} computes before its input "
        f"arrives: no {recv} is posted earlier in this row, so torch's runtime stops this rank "
        f"with '{said} action={a} before receiving input' and its peers hang. Put {recv} "
        f"before {a} in row {rank + 1} (and its SEND on the peer's row).",
        path,
        rank + 1,
    )


def _peer(owner: dict[int, int], stage: int, a: PipeAction, rank: int, path: str | None) -> int:
    """The rank that holds `stage`; raises the located error when there is none to talk to."""
    if stage not in owner:
        raise CommlintInputError(
            f"rank {rank}: {a} talks to stage {stage}, which no rank computes", path, rank + 1
        )
    peer = owner[stage]
    if peer == rank:
        raise CommlintInputError(
            f"rank {rank}: {a} talks to stage {stage} on the same rank (torch skips "
            "communication between adjacent stages on one rank)",
            path,
            rank + 1,
        )
    return peer


def load_pipelining_csv(path: str | Path, fmt: str = "auto") -> Trace:
    """Read a schedule CSV; `fmt` is `compute_only`, `compute_comms` or `auto` (by content)."""
    name = str(path)
    return loads_pipelining_csv(read_text(path, what="a CSV"), fmt, name)


def loads_pipelining_csv(text: str, fmt: str = "auto", path: str | None = None) -> Trace:
    """As `load_pipelining_csv`, from the CSV text."""
    # Importing allocates a few small objects per cell that never form cycles; the cyclic
    # collector's passes over them cost as much as the import itself (measured 2x).
    with paused_gc():
        return _loads(text, fmt, path)


def _loads(text: str, fmt: str, path: str | None) -> Trace:
    rows, seen_in_file = _read(text, path)
    if fmt == "auto":
        fmt = "compute_only" if seen_in_file.comms_at is None else "compute_comms"
    if fmt not in ("compute_only", "compute_comms"):
        raise CommlintInputError(f"unknown CSV format {fmt!r}", path)
    owner = seen_in_file.owner
    if not owner or len(owner) != max(owner) + 1:
        owner = stage_ranks(rows, path)  # it raises the located error
    # No `validated()` pass: every action is well-formed by construction (peers are other
    # ranks inside the world, waits name handles posted before them); tests assert it.
    if fmt == "compute_only":  # lowered straight to compact rows, in one pass
        compact, fsdp = _lower(rows, path, None, owner, True, seen_in_file)
        return _packed_trace(compact, owner, path, fmt, fsdp)
    # compute_comms is taken as written; its idle cells keep the columns of the file
    return to_trace(rows, owner, path, fmt)


__all__ = [
    "PipeAction",
    "load_pipelining_csv",
    "loads_pipelining_csv",
    "lower_compute_only",
    "parse_action",
    "read_csv",
    "stage_ranks",
]
