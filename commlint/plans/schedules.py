"""Pipeline schedules as per-stage compute orders: GPipe, 1F1B, interleaved 1F1B, ZB-H1, CSV.

A schedule is, for each pipeline rank (position in its pipeline group), the ordered list of
compute steps it runs: `Step(kind, stage, microbatch)` with `kind` one of `F` (forward),
`B` (full backward), `I` (backward for inputs), `W` (backward for weights). `stage` is the
virtual stage index `0 … pp*vpp-1`; `StageMap` says which pipeline rank holds it.
Communication is derived from these steps by `commlint.plans.generate`.

The CSV form is the one `torch.distributed.pipelining` reads and writes (`_load_csv`,
`_dump_csv`): row *i* is pipeline rank *i*, one action per cell (`0F3`, `1B2`, `2W0`,
`1SEND_F3`, …), an empty cell is an idle step.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from commlint.findings import CommlintInputError

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zbh1")
COMPUTE_KINDS = frozenset({"F", "B", "I", "W"})
COMM_KINDS = frozenset({"SEND_F", "RECV_F", "SEND_B", "RECV_B"})
_TORCH_ONLY = frozenset({"UNSHARD", "RESHARD", "REDUCE_GRAD"})


class Step(NamedTuple):
    """One action of a pipeline rank: compute (`F B I W`) or, from a CSV, a comm action."""

    kind: str
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


@dataclass(frozen=True)
class StageMap:
    """Which pipeline rank holds each virtual stage."""

    pp: int
    num_stages: int
    owner: tuple[int, ...]

    @classmethod
    def loop(cls, pp: int, vpp: int) -> StageMap:
        """Megatron / torch default: stage `v` on rank `v % pp` (chunk `v // pp`)."""
        n = pp * vpp
        return cls(pp, n, tuple(v % pp for v in range(n)))

    def rank_of(self, stage: int) -> int:
        return self.owner[stage]


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise CommlintInputError(message)


def gpipe(pp: int, microbatches: int) -> dict[int, list[Step]]:
    """All forwards, then all backwards (torch's ScheduleGPipe)."""
    fwd = [("F", m) for m in range(microbatches)]
    bwd = [("B", m) for m in range(microbatches)]
    return {p: [Step(k, p, m) for k, m in fwd + bwd] for p in range(pp)}


def one_f_one_b(pp: int, microbatches: int, split_backward: bool = False) -> dict[int, list[Step]]:
    """1F1B: `pp - p - 1` warm-up forwards, then F/B pairs, then the remaining backwards.

    With `split_backward` (ZB-H1), each backward is `I` followed later by `W`: the weight
    gradient of microbatch `m` is deferred by `pp - p - 1` microbatches to fill the bubble.
    """
    out: dict[int, list[Step]] = {}
    for p in range(pp):
        warmup = min(pp - p - 1, microbatches)
        steps: list[Step] = [Step("F", p, m) for m in range(warmup)]
        lag = pp - p - 1 if split_backward else 0
        pending_w: list[int] = []
        order = [("F", warmup + i, i) for i in range(microbatches - warmup)]
        order += [(None, None, m) for m in range(microbatches - warmup, microbatches)]
        for _, fwd, bwd in order:
            if fwd is not None:
                steps.append(Step("F", p, fwd))
            if not split_backward:
                steps.append(Step("B", p, bwd))
                continue
            steps.append(Step("I", p, bwd))
            pending_w.append(bwd)
            if len(pending_w) > lag:
                steps.append(Step("W", p, pending_w.pop(0)))
        steps.extend(Step("W", p, m) for m in pending_w)
        out[p] = steps
    return out


def interleaved(pp: int, vpp: int, microbatches: int) -> dict[int, list[Step]]:
    """Megatron's interleaved 1F1B (virtual pipeline): microbatch groups of size `pp`.

    Virtual microbatch `k` runs model chunk `(k mod pp*vpp) // pp` (reversed for backward)
    on microbatch `(k // (pp*vpp))*pp + k mod pp`; warm-up is `2(pp-p-1) + (vpp-1)pp`
    virtual microbatches, or all of them when `microbatches == pp`.
    """
    _require(
        microbatches % pp == 0,
        f"schedule 'interleaved' needs microbatches ({microbatches}) to be a multiple of "
        f"pp ({pp}) (Megatron's microbatch group size)",
    )
    total = microbatches * vpp
    group = pp * vpp

    def chunk(k: int, forward: bool) -> int:
        c = (k % group) // pp
        return c if forward else vpp - 1 - c

    def mb(k: int) -> int:
        return (k // group) * pp + k % pp

    out: dict[int, list[Step]] = {}
    for p in range(pp):
        warmup = interleaved_warmup(pp, vpp, microbatches, p)
        steps = [Step("F", chunk(k, True) * pp + p, mb(k)) for k in range(warmup)]
        for k in range(total - warmup):
            kf = k + warmup
            steps.append(Step("F", chunk(kf, True) * pp + p, mb(kf)))
            steps.append(Step("B", chunk(k, False) * pp + p, mb(k)))
        for k in range(total - warmup, total):
            steps.append(Step("B", chunk(k, False) * pp + p, mb(k)))
        out[p] = steps
    return out


def interleaved_warmup(pp: int, vpp: int, microbatches: int, p: int) -> int:
    """Forward-only virtual microbatches before pipeline rank `p`'s first backward."""
    total = microbatches * vpp
    if microbatches == pp:
        return total
    return min((pp - p - 1) * 2 + (vpp - 1) * pp, total)


def iterations(steps: list[Step], warmup: int) -> list[list[Step]]:
    """Megatron's interleaved loop: warm-up forwards alone, then (F, B) pairs, then backwards."""
    out: list[list[Step]] = [[s] for s in steps[:warmup]]
    rest = steps[warmup:]
    i = 0
    while i < len(rest):
        if rest[i].kind == "F" and i + 1 < len(rest) and rest[i + 1].kind != "F":
            out.append([rest[i], rest[i + 1]])
            i += 2
        else:
            out.append([rest[i]])
            i += 1
    return out


def build(name: str, pp: int, vpp: int, microbatches: int) -> dict[int, list[Step]]:
    """The compute order of a named schedule."""
    if name == "gpipe":
        _require(vpp == 1, "schedule 'gpipe' has one stage per rank; use vpp: 1")
        return gpipe(pp, microbatches)
    if name in ("1f1b", "zbh1"):
        _require(
            vpp == 1, f"schedule '{name}' has one stage per rank; use 'interleaved' for vpp > 1"
        )
        return one_f_one_b(pp, microbatches, split_backward=name == "zbh1")
    if name == "interleaved":
        return interleaved(pp, vpp, microbatches)
    raise CommlintInputError(f"unknown schedule {name!r} (expected {', '.join(SCHEDULES)} or csv)")


@dataclass
class CsvSchedule:
    """A schedule read from a torch.distributed.pipelining CSV."""

    steps: dict[int, list[Step]]
    stages: StageMap
    microbatches: int
    with_comms: bool


def parse_action(text: str, where: str) -> Step | None:
    """`2F13` → Step('F', 2, 13); empty or a torch runtime-only action → None."""
    steps = parse_cell(text, where)
    return steps[0] if steps else None


def parse_cell(text: str, where: str, quote: bool = True) -> list[Step]:
    """One CSV cell: an action, `(0F1;1B0)OVERLAP_F_B` (its parts in order), or nothing.

    UNSHARD / RESHARD / REDUCE_GRAD, which torch's runtime inserts for FSDP, carry no p2p;
    they are skipped (the generator models FSDP and gradient sync as collectives).
    """
    from commlint.plans.importers.pipelining_csv import parse_action as parse_torch_action

    try:
        action = parse_torch_action(text)
    except (ValueError, RecursionError):
        shown = f" {text.strip()!r}" if quote else ""
        raise CommlintInputError(
            f"{where}: cannot read action{shown} (expected e.g. 0F3, 1B2, 0W1, "
            "1SEND_F3, (0F1;1B0)OVERLAP_F_B)"
        ) from None
    if action is None:
        return []
    out: list[Step] = []
    for part in action.parts if action.parts is not None else (action,):
        if part.kind in _TORCH_ONLY:
            continue
        if part.mb is None:
            raise CommlintInputError(f"{where}: action {str(part)!r} has no microbatch index")
        out.append(Step(part.kind, part.stage, part.mb))
    return out


def csv_rows(text: str, source: str = "csv") -> list[list[str]]:
    """The rows of a CSV text; a row the csv module refuses (a cell past its field limit, a
    NUL) is a located error naming the row, never an unlocated `csv.Error`."""
    reader = csv.reader(io.StringIO(text))
    rows: list[list[str]] = []
    try:
        for row in reader:
            rows.append(row)
    except csv.Error as exc:
        why = str(exc).split(" (")[0] if "field larger" in str(exc) else str(exc)
        raise CommlintInputError(
            f"{source}: row {reader.line_num}: not readable as CSV ({why})"
        ) from None
    return rows


def read_csv(text: str, source: str = "csv", quote: bool = True) -> CsvSchedule:
    """Read a compute-only or compute+comms CSV; infer the stage → rank map from it.

    `quote`: a cell that cannot be read is shown in the error (not for a file a plan names,
    whose text is never shown: only its row and column)."""
    rows = csv_rows(text, source)
    while rows and not any(c.strip() for c in rows[-1]):
        rows.pop()
    if not rows:
        raise CommlintInputError(f"{source}: the schedule CSV is empty")
    steps: dict[int, list[Step]] = {}
    owner: dict[int, int] = {}
    with_comms = False
    cells = 0
    top, top_at = 0, ""  # the largest stage or microbatch index, and where it is
    for r, row in enumerate(rows):
        out: list[Step] = []
        for c, cell in enumerate(row):
            where = f"{source}: row {r + 1}, column {c + 1}"
            for step in parse_cell(cell, where, quote):
                cells += 1
                if max(step.stage, step.microbatch) > top:
                    top, top_at = max(step.stage, step.microbatch), f"{where}: {step}"
                if step.kind in COMM_KINDS:
                    with_comms = True
                else:
                    prev = owner.setdefault(step.stage, r)
                    if prev != r:
                        raise CommlintInputError(
                            f"{source}: row {r + 1}: stage {step.stage} is also computed on "
                            f"row {prev + 1}; a stage lives on one pipeline rank"
                        )
                out.append(step)
        steps[r] = out
    # stages 0…s and microbatches 0…m each need cells of their own: an index far beyond the
    # file's cells is refused before anything is sized by it (a few bytes naming stage 10⁹)
    if top > 2 * cells + 8:
        raise CommlintInputError(
            f"{top_at}: index {top} is beyond what the file holds ({cells} action cells; every "
            "stage and microbatch below an index needs cells of its own)"
        )
    pp = len(rows)
    num_stages = max(owner) + 1 if owner else 0
    missing = [s for s in range(num_stages) if s not in owner]
    if missing:
        raise CommlintInputError(f"{source}: stages {missing} are never computed")
    if not owner:
        raise CommlintInputError(f"{source}: no compute actions (F, B, I, W) in the schedule")
    mbs = {s.microbatch for row in steps.values() for s in row}
    _check_counts(steps, num_stages, mbs, source)
    return CsvSchedule(
        steps,
        StageMap(pp, num_stages, tuple(owner[s] for s in range(num_stages))),
        max(mbs) + 1,
        with_comms,
    )


def _check_counts(
    steps: dict[int, list[Step]], num_stages: int, mbs: Iterable[int], source: str
) -> None:
    """Every stage runs F once per microbatch and a full backward (B, or I and W) once."""
    seen: dict[tuple[str, int, int], int] = {}
    for row in steps.values():
        for s in row:
            if s.kind in COMPUTE_KINDS:
                key = (s.kind, s.stage, s.microbatch)
                seen[key] = seen.get(key, 0) + 1
    for stage in range(num_stages):
        for m in sorted(set(mbs)):
            f = seen.get(("F", stage, m), 0)
            if f != 1:
                raise CommlintInputError(f"{source}: stage {stage} {_times('F', m, f)}")
            b = seen.get(("B", stage, m), 0) + seen.get(("I", stage, m), 0)
            if b != 1:
                raise CommlintInputError(
                    f"{source}: stage {stage} {_times('the backward (B or I)', m, b)}"
                )


def _times(what: str, m: int, count: int) -> str:
    if count == 0:
        return f"never runs {what} for microbatch {m} (other stages do; expected once)"
    return f"runs {what} for microbatch {m} {count} times (expected once)"


def dump_csv(steps: dict[int, list[Step]]) -> str:
    """The CSV torch.distributed.pipelining reads (`_load_csv`), without idle cells."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for p in sorted(steps):
        writer.writerow([str(s) for s in steps[p]])
    return buf.getvalue()
