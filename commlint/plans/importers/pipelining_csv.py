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
action that consumes it (F for RECV_F, I or B for RECV_B). Stages are placed on ranks as
`_validate_schedule` infers them: from the row that computes them. UNSHARD / RESHARD /
REDUCE_GRAD are FSDP collectives on a data-parallel group the CSV does not describe: they are
counted in `meta`, not checked.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from commlint.findings import CommlintInputError
from commlint.plans.importers.common import validated
from commlint.trace import Action, Trace

_ACTION = re.compile(
    r"^(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)$"
)
_OVERLAP = re.compile(r"^\((.*)\)OVERLAP_F_B$")
COMPUTE = {"F", "I", "B", "W"}
COMMS = {"SEND_F", "RECV_F", "SEND_B", "RECV_B"}
FSDP = {"UNSHARD", "RESHARD", "REDUCE_GRAD"}


@dataclass(frozen=True)
class PipeAction:
    """One cell: `stage` `kind` `microbatch` (`2F0`); `parts` for OVERLAP_F_B."""

    stage: int
    kind: str
    mb: int | None = None
    parts: tuple[PipeAction, ...] | None = None

    def __str__(self) -> str:
        if self.parts is not None:
            return f"({';'.join(str(p) for p in self.parts)})OVERLAP_F_B"
        return f"{self.stage}{self.kind}{'' if self.mb is None else self.mb}"


def parse_action(text: str) -> PipeAction | None:
    """`2F0` → PipeAction(2, "F", 0); empty → None. Raises ValueError on anything else."""
    text = text.strip()
    if not text or text == "None":
        return None
    m = _OVERLAP.match(text)
    if m:
        parts = tuple(p for p in (parse_action(s) for s in m.group(1).split(";")) if p)
        return PipeAction(-1, "OVERLAP_F_B", None, parts)
    m = _ACTION.match(text)
    if not m:
        raise ValueError(
            f"invalid action {text!r}: expected [stage][type][microbatch] such as 2F0, "
            "1RECV_F3, 0UNSHARD"
        )
    stage, kind, mb = m.groups()
    return PipeAction(int(stage), kind, int(mb) if mb else None)


def read_csv(text: str, path: str | None = None) -> dict[int, list[PipeAction | None]]:
    """Rows of a schedule CSV; errors name the row (rank) and column."""
    rows: dict[int, list[PipeAction | None]] = {}
    for rank, row in enumerate(csv.reader(io.StringIO(text))):
        cells: list[PipeAction | None] = []
        for col, cell in enumerate(row):
            try:
                cells.append(parse_action(cell))
            except ValueError as exc:
                raise CommlintInputError(
                    f"rank {rank} (row {rank + 1}), column {col + 1}: {exc}", path, rank + 1
                ) from None
        rows[rank] = cells
    if not rows:
        raise CommlintInputError("empty schedule CSV", path)
    return rows


def _flat(a: PipeAction) -> tuple[PipeAction, ...]:
    return a.parts if a.parts is not None else (a,)


def stage_ranks(rows: dict[int, list[PipeAction | None]], path: str | None = None) -> dict:
    """Stage → rank, from the rows that compute each stage (as `_validate_schedule`)."""
    owner: dict[int, int] = {}
    for rank, cells in rows.items():
        for cell in cells:
            for a in _flat(cell) if cell else ():
                if a.kind not in COMPUTE and a.kind not in FSDP:
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
    missing = sorted(set(range(max(owner) + 1)) - set(owner))
    if missing:
        raise CommlintInputError(f"stages {missing} are never computed by any rank", path)
    return owner


def _add_fsdp_steps(cells: list[PipeAction | None], n_microbatches: int) -> list[PipeAction]:
    """UNSHARD/RESHARD (prefetch of the next 3 stages) and REDUCE_GRAD after a stage's last
    backward, as torch's `_add_unshard_reshard` and `_add_reduce_grad` insert them. They carry
    no p2p, but they take turns in the round-robin lowering, so they decide where peers'
    RECVs land."""
    actions = [a for a in cells if a is not None]
    out: list[PipeAction] = []
    active: list[int] = []
    for i, a in enumerate(actions):
        upcoming: list[int] = []
        for nxt in actions[i:]:
            for part in _flat(nxt):
                if part.stage not in upcoming:
                    upcoming.append(part.stage)
            if len(upcoming) >= 3:
                break
        upcoming = upcoming[:3] if a.parts is None else upcoming
        for st in sorted(s for s in active if s not in upcoming):
            active.remove(st)
            out.append(PipeAction(st, "RESHARD"))
        for st in upcoming:
            if st not in active:
                active.append(st)
                out.append(PipeAction(st, "UNSHARD"))
        out.append(a)
    for st in sorted(active):
        out.append(PipeAction(st, "RESHARD"))
    with_grad: list[PipeAction] = []
    backwards: dict[int, int] = {}
    for a in out:
        with_grad.append(a)
        for part in _flat(a):
            if part.kind in ("W", "B"):
                backwards[part.stage] = backwards.get(part.stage, 0) + 1
                if backwards[part.stage] == n_microbatches:
                    with_grad.append(PipeAction(part.stage, "REDUCE_GRAD"))
    return with_grad


def lower_compute_only(
    rows: dict[int, list[PipeAction | None]],
    path: str | None = None,
    n_microbatches: int | None = None,
) -> dict[int, list[PipeAction]]:
    """Lower a compute-only schedule the way torch's `_prepare_schedule_with_comms` does:
    FSDP steps first, then SEND/RECV in the order of `_add_send_recv`."""
    owner = stage_ranks(rows, path)
    if n_microbatches is None:
        mbs = [a.mb for cells in rows.values() for c in cells if c for a in _flat(c)]
        n_microbatches = max((m for m in mbs if m is not None), default=-1) + 1
    num_stages = max(owner) + 1
    for rank, cells in rows.items():
        for col, cell in enumerate(cells):
            if cell is not None and any(a.kind in COMMS for a in _flat(cell)):
                raise CommlintInputError(
                    f"rank {rank}, column {col + 1}: {cell} in a compute_only schedule "
                    "(use --input-format pipelining-csv with a compute_comms CSV as written)",
                    path,
                    rank + 1,
                )

    def has_comms(a: PipeAction) -> bool:
        if a.kind == "F":
            return a.stage != num_stages - 1 and owner[a.stage + 1] != owner[a.stage]
        if a.kind in ("I", "B"):
            return a.stage != 0 and owner[a.stage - 1] != owner[a.stage]
        return False

    def ready(a: PipeAction | None, seen: set[PipeAction]) -> bool:
        if a is None:
            return True
        if a.kind == "F" and a.stage != 0:
            return (
                PipeAction(a.stage, "RECV_F", a.mb) in seen
                or PipeAction(a.stage - 1, "F", a.mb) in seen
            )
        if a.kind in ("I", "B") and a.stage != num_stages - 1:
            return (
                PipeAction(a.stage, "RECV_B", a.mb) in seen
                or PipeAction(a.stage + 1, "I", a.mb) in seen
                or PipeAction(a.stage + 1, "B", a.mb) in seen
            )
        return True

    todo = {r: _add_fsdp_steps(cells, n_microbatches) for r, cells in rows.items()}
    todo = {r: cells for r, cells in todo.items() if cells}
    out: dict[int, list[PipeAction]] = {r: [] for r in rows}
    seen: dict[int, set[PipeAction]] = {r: set() for r in rows}
    while todo:
        progress = False
        for rank in sorted(todo):
            action = todo[rank][0]
            parts = _flat(action) if action is not None else (None,)
            if not all(ready(a, seen[rank]) for a in parts):
                continue
            if action is not None:
                out[rank].append(action)
                for a in parts:
                    seen[rank].add(a)
                    if has_comms(a):
                        send_kind, recv_kind = (
                            ("SEND_F", "RECV_F")
                            if a.kind == "F"
                            else (
                                "SEND_B",
                                "RECV_B",
                            )
                        )
                        peer_stage = a.stage + 1 if a.kind == "F" else a.stage - 1
                        send = PipeAction(a.stage, send_kind, a.mb)
                        recv = PipeAction(peer_stage, recv_kind, a.mb)
                        out[rank].append(send)
                        seen[rank].add(send)
                        out[owner[peer_stage]].append(recv)
                        seen[owner[peer_stage]].add(recv)
            todo[rank].pop(0)
            if not todo[rank]:
                del todo[rank]
            progress = True
        if not progress:
            stuck = ", ".join(f"rank {r} at {todo[r][0]}" for r in sorted(todo))
            raise CommlintInputError(
                f"the compute-only schedule cannot be lowered (torch raises 'Malformed compute "
                f"schedule'): no rank can take its next action — {stuck}; each waits for an "
                "input that no earlier action produces",
                path,
            )
    return out


def to_trace(
    schedule: dict[int, list[PipeAction]],
    owner: dict[int, int],
    path: str | None = None,
    fmt: str = "compute_comms",
) -> Trace:
    """A lowered schedule → per-rank isend/irecv/wait actions."""
    world = max([*schedule, *owner.values()]) + 1
    ranks: dict[int, list[Action]] = {}
    fsdp = 0
    for rank, cells in schedule.items():
        site = f"{path}:{rank + 1}" if path else None  # the rank's row
        acts: list[Action] = []
        pending_recv: dict[tuple[str, int, int | None], str] = {}
        sends: list[str] = []
        for col, cell in enumerate(cells):
            for a in _flat(cell):
                if a.kind in FSDP:
                    fsdp += 1
                    continue
                if a.kind in ("SEND_F", "SEND_B"):
                    peer_stage = a.stage + 1 if a.kind == "SEND_F" else a.stage - 1
                    peer = _peer(owner, peer_stage, a, rank, path)
                    h = f"{a}"
                    sends.append(h)
                    acts.append(Action(op="isend", peer=peer, handle=h, label=str(a), site=site))
                elif a.kind in ("RECV_F", "RECV_B"):
                    peer_stage = a.stage - 1 if a.kind == "RECV_F" else a.stage + 1
                    peer = _peer(owner, peer_stage, a, rank, path)
                    h = f"{a}"
                    key = ("F" if a.kind == "RECV_F" else "B", a.stage, a.mb)
                    if key in pending_recv:
                        raise CommlintInputError(
                            f"rank {rank}, column {col + 1}: {a} posted twice before its "
                            "compute (torch: 'Recv twice ... without executing')",
                            path,
                            rank + 1,
                        )
                    pending_recv[key] = h
                    acts.append(Action(op="irecv", peer=peer, handle=h, label=str(a), site=site))
                elif a.kind in ("F", "I", "B"):
                    key = ("F" if a.kind == "F" else "B", a.stage, a.mb)
                    h = pending_recv.pop(key, None)
                    if h is not None:
                        acts.append(Action(op="wait", handles=[h], label=f"before {a}", site=site))
        leftover = list(pending_recv.values())
        if sends or leftover:
            acts.append(Action(op="wait", handles=sends + leftover, label="end of step"))
        ranks[rank] = acts
    return Trace(
        world_size=world,
        ranks=ranks,
        source=f"pipelining-csv ({fmt})",
        meta={
            "pipelining": {
                "format": fmt,
                "stage_to_rank": {str(s): r for s, r in sorted(owner.items())},
                "schedule": {str(r): [str(a) for a in cells] for r, cells in schedule.items()},
                "fsdp_actions_not_checked": fsdp,
            }
        },
    )


def _peer(owner: dict[int, int], stage: int, a: PipeAction, rank: int, path: str | None) -> int:
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


def is_compute_only(rows: dict[int, list[PipeAction | None]]) -> bool:
    return not any(a.kind in COMMS for cells in rows.values() for c in cells if c for a in _flat(c))


def load_pipelining_csv(path: str | Path, fmt: str = "auto") -> Trace:
    """Read a schedule CSV; `fmt` is `compute_only`, `compute_comms` or `auto` (by content)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {exc.strerror}", name) from None
    except UnicodeDecodeError:
        raise CommlintInputError("not a UTF-8 text CSV", name) from None
    return loads_pipelining_csv(text, fmt, name)


def loads_pipelining_csv(text: str, fmt: str = "auto", path: str | None = None) -> Trace:
    """As `load_pipelining_csv`, from the CSV text."""
    rows = read_csv(text, path)
    if fmt == "auto":
        fmt = "compute_only" if is_compute_only(rows) else "compute_comms"
    if fmt not in ("compute_only", "compute_comms"):
        raise CommlintInputError(f"unknown CSV format {fmt!r}", path)
    owner = stage_ranks(rows, path)
    if fmt == "compute_only":
        schedule = lower_compute_only(rows, path)
    else:
        schedule = {r: [c for c in cells if c is not None] for r, cells in rows.items()}
    return validated(to_trace(schedule, owner, path, fmt), path)
