"""Rank classes (`commlint run --rank-classes`): one run per program path, not per rank.

Rank 0 is recorded first, then the lowest ranks not yet covered (`-j` at a time), until
every rank is covered. Each recorded rank's `ClassRecord` (`tracked.py`, `rankexpr.py`)
names its path condition; every uncovered rank that satisfies it, and whose relabelled
trace is consistent, is *derived*: its trace is the recorded one with every peer, root and
group member re-evaluated at its rank. A rank whose run proves nothing (it drew from its own
randomness, a peer with no rank expression, the whole rank used as an index) covers only
itself, and the next uncovered rank is recorded.

What the classes cannot carry falls back to recording every rank the ordinary way
(`driver._dry_run`), said in a note: a value sent from one rank to another (a small tensor,
an object collective, files before a barrier) — a derived rank sends nothing, so a reader
would not see what a full run delivers —, and a rank that fake tensors stopped (the real
re-run and the exploration of decisions work on every rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from commlint.plans.dryrun.merge import rank_spec
from commlint.plans.dryrun.rankexpr import ClassRecord, cover

_SHOWN = 3  # ranks recorded on their own that the note names


def _carries(value: Any) -> bool:
    """Whether a contribution holds anything a reader could see (a fake tensor's is None)."""
    if isinstance(value, (tuple, list)):
        return any(_carries(v) for v in value)
    return value is not None


def _fallback(rank: int, run: Any) -> str | None:
    """Why the classes cannot carry this run: every rank must then be recorded."""
    if any(key[0] == "s" for key in run.reads):
        return f"rank {rank} received from any source, which pairs by the senders of a full run"
    # ("s", ...): that a message exists, for a receive from any source (which falls back)
    carried = [key for key, value in run.sent.items() if key[0] != "s" and _carries(value)]
    if carried:
        key = carried[0]
        return (
            f"rank {rank} sent a value other ranks read ({key[0]!r} on {key[1]}), which a "
            "derived rank would not send"
        )
    if run.fake_limit:
        return f"fake tensors stopped rank {rank} ({run.fake_limit[0]})"
    end = run.end or {}
    if end.get("kind") == "exception" and "RankValue" in str(end.get("message")):
        return f"the tracked rank broke rank {rank}'s program at {end.get('site')}"
    return None


def record_by_class(
    options: Any,
    run_pass: Callable[[list[int]], dict[int, Any]],
    on_start_pass: Callable[[int, int], None] | None = None,
) -> tuple[dict[int, Any], dict[int, int], int, list[str]] | str:
    """Every rank of `options.ranks` recorded or derived: (runs, derived rank -> the rank
    it was derived from, passes, notes); or why every rank must be recorded instead."""
    uncovered = sorted(options.ranks)
    runs: dict[int, Any] = {}
    derived: dict[int, int] = {}
    alone: dict[int, str] = {}
    passes = 0
    while uncovered:
        batch = uncovered[:1] if not runs else uncovered[: max(1, options.jobs)]
        passes += 1
        if on_start_pass:
            on_start_pass(passes, len(batch))
        new = run_pass(batch)
        for r in batch:
            why = _fallback(r, new[r])
            if why is not None:
                return why
        runs.update(new)
        uncovered = [u for u in uncovered if u not in new]
        for r in batch:
            run = new[r]
            if run.classes is None:
                alone[r] = "it sent no class record (it did not reach its end)"
                continue
            got, why = cover(ClassRecord.from_message(run.classes), run, r, uncovered)
            if why is not None:
                alone[r] = why
            for other, relabelled in got.items():
                runs[other] = relabelled
                derived[other] = r
            if got:
                uncovered = [u for u in uncovered if u not in got]
    recorded = len(runs) - len(derived)
    notes = [
        f"rank classes: {recorded} of {len(runs)} rank{'s' if len(runs) != 1 else ''} "
        f"recorded ({rank_spec(sorted(r for r in runs if r not in derived))}), "
        f"{len(derived)} derived: each derived rank satisfies the path condition of a "
        "recorded rank, and its trace is that trace with every peer, root and group "
        "re-evaluated at its rank"
    ]
    shown = sorted(alone)[:_SHOWN]
    for r in shown:
        notes.append(f"rank classes: rank {r} covers only itself: {alone[r]}")
    if len(alone) > len(shown):
        notes.append(f"rank classes: {len(alone) - len(shown)} more ranks cover only themselves")
    return runs, derived, passes, notes
