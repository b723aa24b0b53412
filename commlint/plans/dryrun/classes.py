"""Rank classes (`commlint run --rank-classes`): one run per program path, not per rank.

Rank 0 is recorded first, then the lowest ranks not yet covered (`-j` at a time), until
every rank is covered. Each recorded rank's `ClassRecord` (`tracked.py`, `rankexpr.py`)
names its path condition; every uncovered rank that satisfies it, and whose relabelled
trace is consistent, is *derived*: its trace is the recorded one with every peer, root and
group member re-evaluated at its rank. A rank whose run proves nothing (it drew from its own
randomness, a peer with no rank expression, the whole rank used as an index) covers only
itself, and the next uncovered rank is recorded.

Values ranks send each other (a small tensor, an object collective, a pipeline's vote) travel
as in a full run, a derived rank sending its recorded rank's values under relabelled keys, and a
rank not covered yet assumed to send what a recorded run re-evaluated at it sends (`_Assumed`);
every read is checked at the end against what every rank sent (`record_by_class`). What the classes
cannot carry falls back to recording every rank the ordinary way (`driver._dry_run`), said in
a note: a receive from any source, and a rank that fake tensors stopped (the real re-run and
the exploration of decisions work on every rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from commlint.plans.dryrun.merge import rank_spec
from commlint.plans.dryrun.rankexpr import ClassRecord, Evaluator, cover, sent_as
from commlint.plans.dryrun.values import ValueTable
from commlint.trace import Action

_SHOWN = 3  # ranks recorded on their own that the note names
_PULLED = 8  # senders not covered yet a receive may pull into its pass
# what a sender not covered yet is assumed to send comes from the recorded ranks nearest it
# (the likeliest first: one whose path fails at more places may be the only one that sends
# such a message — the first rank of a stage, for the rank beside it)
_NEAREST = 16


def _fallback(rank: int, run: Any) -> str | None:
    """Why the classes cannot carry this run: every rank must then be recorded."""
    if any(key[0] == "s" for key in run.reads):
        return f"rank {rank} received from any source, which pairs by the senders of a full run"
    if run.fake_limit:
        return f"fake tensors stopped rank {rank} ({run.fake_limit[0]})"
    end = run.end or {}
    if end.get("kind") == "exception" and "RankValue" in str(end.get("message")):
        return f"the tracked rank broke rank {rank}'s program at {end.get('site')}"
    return None


def _stale(runs: dict[int, Any], table: ValueTable) -> list[int]:
    """The ranks, recorded or derived, that read other values than every rank now sends."""
    return [
        r
        for r, run in runs.items()
        if any(table.signature(key, r) != sig for key, sig in run.reads.items())
    ]


_UNKNOWN = object()  # no recorded run sends such a value
_PLAIN_FIELDS = {"group", "peer", "root"}  # what relabelling changes: a str, two ints


class _Assumed:
    """What a sender not covered yet is assumed to send under a key (`value`): what a
    recorded run re-evaluated at the sender sends under it (`rankexpr.sent_as`) — of the
    `_NEAREST` recorded ranks nearest the sender, those whose path condition fails at fewer
    places at it first (None: a message without a value; `_UNKNOWN`: none sends one).

    A rank waiting for it reads that value instead of pulling the sender into its pass (and
    the sender's own senders in turn: a pipeline's vote passes through every stage, so
    pulling recorded one rank of every stage for each class of the first stage), and a
    collective's members not covered yet contribute theirs. It is an assumption, not a
    proof: once the sender is recorded or derived, what it really sends is checked against
    what was read (`_stale`), and a rank that read otherwise is recorded again.

    Each (recorded rank, sender) pair is evaluated once, however many passes ask: the cost
    stays with the few ranks that wait, not with the world."""

    def __init__(self, runs: dict[int, Any], records: dict[int, ClassRecord]) -> None:
        self.runs, self.records = runs, records
        self._misses: dict[tuple[int, int], int] = {}  # (recorded, sender) -> conditions failed
        self._sent: dict[tuple[int, int], dict] = {}  # (recorded, sender) -> `sent_as`

    def forget(self, rank: int) -> None:
        """`rank`'s record changed (recorded again, or dropped)."""
        for cache in (self._misses, self._sent):
            for pair in [p for p in cache if p[0] == rank]:
                del cache[pair]

    def _failed(self, r: int, sender: int) -> int:
        if (r, sender) not in self._misses:
            ev = Evaluator(self.records[r])
            env = ev.env(sender)
            failed = 0
            for cond in self.records[r].conds:
                try:
                    failed += not ev.value(cond, env)
                except Exception:
                    failed += 1
            self._misses[(r, sender)] = failed
        return self._misses[(r, sender)]

    def value(self, key: Any, sender: int) -> Any:
        near = sorted(self.records, key=lambda r: abs(r - sender))[:_NEAREST]
        for r in sorted(near, key=lambda r: (self._failed(r, sender), abs(r - sender))):
            if (r, sender) not in self._sent:
                self._sent[(r, sender)] = sent_as(self.runs[r], self.records[r], r, sender)
            sent = self._sent[(r, sender)]
            if key in sent:
                return sent[key]
        return _UNKNOWN


def validated_actions(
    runs: dict[int, Any], derived: dict[int, int], ranks: list[int]
) -> dict[int, list[Action]]:
    """Each rank's actions as `Action`s. A derived rank's are its recorded rank's, relabelled:
    each is a copy of the recorded one with the fields the relabelling changed (a group, a
    peer, a root), not validated again — 323,584 validations took 16 of the parent's CPU
    seconds at 4,096 ranks."""
    out: dict[int, list[Action]] = {}

    def of(r: int) -> list[Action]:
        if r not in out:
            out[r] = [Action.model_validate(a) for a in runs[r].actions]
        return out[r]

    for r in ranks:
        src = derived.get(r)
        if src is None or src not in runs or len(runs[src].actions) != len(runs[r].actions):
            of(r)
            continue
        mine = []
        for a, b, done in zip(runs[r].actions, runs[src].actions, of(src), strict=True):
            changed = {k: v for k, v in a.items() if b.get(k, _UNKNOWN) != v}
            if a.keys() != b.keys() or not changed.keys() <= _PLAIN_FIELDS:
                mine.append(Action.model_validate(a))
            else:
                mine.append(done.model_copy(update=changed) if changed else done)
        out[r] = mine
    return {r: out[r] for r in ranks}


# (key, senders not in the pass) -> (those to start in it, the values assumed of others, None
# for a message without one): what a rank waiting for a value asks (`driver._pass`)
Pull = Callable[[Any, list[int]], tuple[list[int], dict[int, Any]]]


def record_by_class(
    options: Any,
    run_pass: Callable[[list[int], ValueTable, Pull], dict[int, Any]],
    on_start_pass: Callable[[int, int], None] | None = None,
) -> tuple[dict[int, Any], dict[int, int], int, list[str]] | str:
    """Every rank of `options.ranks` recorded or derived: (runs, derived rank -> the rank
    it was derived from, passes, notes); or why every rank must be recorded instead.

    Values ranks send each other (a small tensor, a pipeline's vote) travel as in a full
    run: a covered rank's value is what it sent, a derived rank's is its recorded rank's
    value under the relabelled key (`rankexpr.relabel`), a rank not covered yet is assumed to
    send what a recorded run re-evaluated at it sends (`_Assumed`), or, when none sends such
    a message, is pulled into the pass of the rank waiting for it (`pull`). At the end every
    rank's reads, a
    derived rank's relabelled, are checked against what every rank sent: a rank that read
    something else is recorded again (a derived one itself), until nothing changes."""
    uncovered = sorted(options.ranks)
    table = ValueTable()
    runs: dict[int, Any] = {}
    derived: dict[int, int] = {}
    alone: dict[int, str] = {}
    passes = 0
    queued: set[int] = set()

    records: dict[int, ClassRecord] = {}  # recorded rank -> its record, when it proves one
    assumed = _Assumed(runs, records)
    dropped: set[int] = set()  # ranks recorded or derived once, then found to read otherwise

    def pull(key: Any, senders: list[int]) -> tuple[list[int], dict[int, Any]]:
        """Of the senders a rank waits for that are not in its pass: those to start in it
        (a message's sender), and what the others are assumed to send (`_Assumed`)."""
        got = [s for s in senders if s not in runs and s not in queued]
        assume = {}
        for s in got:
            if s in dropped:
                continue  # it read otherwise once: run it, or its guess comes back forever
            value = assumed.value(key, s)
            if value is not _UNKNOWN:
                assume[s] = value
        start = [s for s in got if s not in assume]
        if key[0] != "p" or len(start) > _PULLED:
            return [], assume  # a collective's: from the table or assumed, checked after
        queued.update(start)
        return start, assume

    def forget(r: int) -> None:
        """`r`'s run, derivation and record dropped: it is recorded (again)."""
        runs.pop(r, None)
        derived.pop(r, None)
        records.pop(r, None)
        assumed.forget(r)

    rounds = 0
    while uncovered:
        rounds += 1
        if rounds > options.max_passes:
            return f"the values ranks exchange did not settle in {options.max_passes} rounds"
        while uncovered:
            batch = uncovered[:1] if not runs else uncovered[: max(1, options.jobs)]
            passes += 1
            if on_start_pass:
                on_start_pass(passes, len(batch))
            queued = set(batch)
            new = run_pass(batch, table, pull)
            for r, run in new.items():
                why = _fallback(r, run)
                if why is not None:
                    return why
            for r, run in new.items():
                forget(r)
                runs[r] = run
                table.replace_rank(r, run.sent)
            uncovered = [u for u in uncovered if u not in new]
            for r in sorted(new):
                run = new[r]
                if run.classes is None:
                    alone[r] = "it sent no class record (it did not reach its end)"
                    continue
                record = ClassRecord.from_message(run.classes)
                got, why = cover(record, run, r, uncovered)
                if why is not None:
                    alone[r] = why
                else:
                    records[r] = record
                for other, relabelled in got.items():
                    runs[other] = relabelled
                    derived[other] = r
                    table.replace_rank(other, relabelled.sent)
                if got:
                    uncovered = [u for u in uncovered if u not in got]
        # What each rank read must be what the others sent (derived ones included): a rank
        # that read something else runs again, with the ranks derived from it.
        stale = set(_stale(runs, table))
        again = stale | {d for d, src in derived.items() if src in stale}
        dropped.update(again)
        for r in again:
            forget(r)
        uncovered = sorted(again)
    recorded = len(runs) - len(derived)
    notes = [
        f"rank classes: {recorded} of {len(runs)} rank{'s' if len(runs) != 1 else ''} "
        f"recorded ({rank_spec(sorted(r for r in runs if r not in derived))}), "
        f"{len(derived)} derived: each derived rank satisfies the path condition of a "
        "recorded rank, and its trace is that trace with every peer, root and group "
        "re-evaluated at its rank"
    ]
    own = sorted(r for r in alone if r in runs and r not in derived)
    for r in own[:_SHOWN]:
        notes.append(f"rank classes: rank {r} covers only itself: {alone[r]}")
    if len(own) > _SHOWN:
        notes.append(f"rank classes: {len(own) - _SHOWN} more ranks cover only themselves")
    return runs, derived, passes, notes
