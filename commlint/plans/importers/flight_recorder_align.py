"""Per-rank alignment of Flight Recorder entries: collectives meet by process group and
`collective_seq_id`, p2p ops by channel in order; entries older than the oldest one every
member still holds (ring-buffer eviction) and a prefix completed on every member are dropped.

Fourth stage of `commlint.plans.importers.flight_recorder` (after `flight_recorder_groups`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import compress, count, islice, repeat
from operator import and_, eq, ge, gt, itemgetter, lt, ne, not_, truth
from typing import Any

from commlint.plans.importers.flight_recorder_entries import _Columns, _Entry
from commlint.plans.importers.flight_recorder_files import MARKERS
from commlint.plans.importers.flight_recorder_groups import _Groups

# --- alignment ------------------------------------------------------------------------------


def _aligned_entries(
    per_rank: Mapping[int, _Columns], pgs: _Groups, keep_completed: bool
) -> tuple[dict[int, list[int]], dict[int, int], _Collectives]:
    """Per rank, the positions of the entries to check (evicted-on-some-rank and
    done-everywhere ones dropped); and every aligned collective, dropped ones included.

    Works a process group at a time: a rank's entries of one group, in order, are compared
    with the first rank's as whole lists (equal sizes and dtypes are one shared tuple, so
    this is mostly identity checks); entry by entry only where they differ."""
    start: dict[str, int] = {}  # first collective seq every dumped member still holds
    done: dict[str, int] = {}  # last seq completed on every dumped member
    runs = {r: _runs(c) for r, c in per_rank.items()}
    for r, rank_runs in runs.items():
        states = per_rank[r].state
        for g, run in rank_runs.items():
            seqs = run.seqs
            seq = seqs[0]
            # the leading entries that completed: up to the first one that did not
            ended = map(ne, map(states.__getitem__, run.at), repeat("completed"))
            k = next(compress(count(), ended), len(seqs))
            last_done = seqs[k - 1] if k else seq - 1
            start[g] = max(start.get(g, seq), seq)
            done[g] = min(done.get(g, last_done), last_done)
    dropped_p2p: set[tuple[int, int]] = set()
    if not keep_completed:
        _drop_completed_p2p(per_rank, pgs, dropped_p2p)
    colls = _Collectives(per_rank, start, done, keep_completed)
    out: dict[int, list[int]] = {}
    dropped: dict[int, int] = {}
    for r, c in per_rank.items():
        kept: list[int] = []
        for g, run in runs[r].items():
            kept.extend(colls.align(g, run))
        if any(c.p2p):
            for i in compress(range(len(c)), c.p2p):
                if c.raw[i] and (r, i) not in dropped_p2p:
                    kept.append(i)
        kept.sort()
        dropped[r] = len(c) - len(kept)
        out[r] = kept
    return out, dropped, colls


class _Run:
    """One rank's collective entries of one process group, in order: positions, seqs, and
    (raw op, sizes, dtypes) as shared tuples."""

    __slots__ = ("at", "payloads", "seqs")

    def __init__(self, c: _Columns, at: Any) -> None:
        self.at = at
        self.seqs = list(map(c.seq.__getitem__, at))
        self.payloads = list(map(c.payload.__getitem__, at))


def _runs(c: _Columns) -> dict[str, _Run]:
    """A rank's collective entries (not p2p, with an op name), split by process group."""
    n = len(c)
    groups: Any = c.group
    if not any(c.p2p) and all(c.raw):
        at: Any = range(n)
    else:
        at = list(compress(range(n), map(and_, map(not_, c.p2p), map(truth, c.raw))))
        groups = list(map(groups.__getitem__, at))
    if not at:
        return {}
    names = dict.fromkeys(groups)
    if len(names) == 1:
        return {next(iter(names)): _Run(c, at)}
    if len(names) <= 8:
        return {g: _Run(c, list(compress(at, map(eq, groups, repeat(g))))) for g in names}
    split: dict[str, list[int]] = {g: [] for g in names}
    for g, i in zip(groups, at, strict=True):
        split[g].append(i)
    return {g: _Run(c, ps) for g, ps in split.items()}


class _Collectives:
    """Every aligned collective (group, seq): the first entry any rank holds of it, as its
    (raw op, sizes, dtypes) tuple, and whether some rank's entry differs from it."""

    def __init__(
        self,
        per_rank: Mapping[int, _Columns],
        start: dict[str, int],
        done: dict[str, int],
        keep_completed: bool,
    ) -> None:
        self.per_rank, self.start, self.done = per_rank, start, done
        self.keep_completed = keep_completed
        self.differ: set[tuple[str, int]] = set()
        # per group, the first entries' seqs and (raw op, sizes, dtypes) in order (`seqs`,
        # `vals`) while every rank so far agrees with them as a list; past the first
        # disagreement, a dict by seq (`firsts`)
        self.seqs: dict[str, list[int]] = {}
        self.vals: dict[str, list[tuple]] = {}
        self.firsts: dict[str, dict[int, tuple]] = {}

    def finished(self, key: tuple[str, int]) -> bool:
        """Completed on every member that holds it (and so dropped from the trace)."""
        return not self.keep_completed and key[1] <= self.done.get(key[0], -1)

    def align(self, g: str, run: _Run) -> list[int]:
        """Compare one rank's run of group `g` with the first entries; its kept positions."""
        first = self.start[g]
        seqs, payloads, at = run.seqs, run.payloads, run.at
        if seqs[0] < first:  # evicted on some member: not aligned
            inside = list(map(ge, seqs, repeat(first)))
            seqs, payloads, at = (list(compress(x, inside)) for x in (seqs, payloads, at))
            if not seqs:
                return []
        keys, vals = seqs, payloads
        if not MARKERS.isdisjoint(map(itemgetter(0), payloads)):
            compared = [p[0] not in MARKERS for p in payloads]
            keys, vals = list(compress(seqs, compared)), list(compress(payloads, compared))
        if keys:
            self._compare(g, keys, vals)
        if self.keep_completed:
            return at
        last_done = self.done[g]
        return list(compress(at, map(gt, seqs, repeat(last_done))))

    def _compare(self, g: str, keys: list[int], vals: list[tuple]) -> None:
        increasing = all(map(lt, keys, islice(keys, 1, None)))
        ref_seqs = self.seqs.get(g)
        if g not in self.firsts and increasing:
            if ref_seqs is None:
                self.seqs[g], self.vals[g] = list(keys), vals
                return
            m = min(len(keys), len(ref_seqs))
            ref_vals = self.vals[g]
            if keys[:m] == ref_seqs[:m]:
                if vals[:m] != ref_vals[:m]:
                    pairs = zip(keys[:m], vals[:m], ref_vals[:m], strict=True)
                    self.differ.update((g, k) for k, a, b in pairs if a != b)
                if len(keys) > m:  # this rank went further: its entries are the first ones
                    ref_seqs.extend(keys[m:])
                    ref_vals.extend(vals[m:])
                return
        firsts = self.firsts.get(g)
        if firsts is None:  # from here on, entry by entry
            pairs = zip(reversed(ref_seqs or ()), reversed(self.vals.get(g, ())), strict=True)
            firsts = self.firsts[g] = dict(pairs)
            self.seqs.pop(g, None)
            self.vals.pop(g, None)
        previous = None
        for key, val in zip(keys, vals, strict=True):
            f = firsts.get(key)
            if f is None:
                firsts[key] = val
            elif key == previous or val != f:  # the same seq twice in a row: coalesced
                self.differ.add((g, key))
            previous = key

    def first_items(self) -> Iterator[tuple[tuple[str, int], tuple]]:
        """((group, seq), (raw op, payload)) of every aligned collective."""
        for g, seqs in self.seqs.items():
            for seq, val in zip(seqs, self.vals[g], strict=True):
                yield (g, seq), val
        for g, firsts in self.firsts.items():
            for seq, val in firsts.items():
                yield (g, seq), val

    def by_rank(self, keys: set[tuple[str, int]]) -> dict[tuple[str, int], dict[int, list]]:
        """(group, seq) → rank → its entries, for `keys` only."""
        out: dict[tuple[str, int], dict[int, list[_Entry]]] = {}
        start = self.start
        for r, c in self.per_rank.items():
            for i, (g, seq, raw, p2p) in enumerate(zip(c.group, c.seq, c.raw, c.p2p, strict=True)):
                if p2p or not raw or raw in MARKERS:
                    continue
                key = (g, seq)
                if key in keys and seq >= start.get(g, 0):
                    out.setdefault(key, {}).setdefault(r, []).append(c.entry(i))
        return out


def _drop_completed_p2p(
    per_rank: Mapping[int, _Columns], pgs: _Groups, dropped: set[tuple[int, int]]
) -> None:
    """Per channel, the leading send/recv pairs completed on both sides are done."""
    sends: dict[tuple[str, int, int], list[tuple[int, _Entry]]] = {}
    recvs: dict[tuple[str, int, int], list[tuple[int, _Entry]]] = {}
    for r, c in per_rank.items():
        for i in compress(range(len(c)), c.p2p):
            e = c.entry(i)
            if e.raw not in ("send", "recv"):
                continue
            peer = _p2p_peer(e, pgs.of[(r, e.pg)].members)
            if peer is None:
                continue
            if e.raw == "send":
                sends.setdefault((e.group, r, peer), []).append((r, e))
            else:
                recvs.setdefault((e.group, peer, r), []).append((r, e))
    for chan, ss in sends.items():
        rs = recvs.get(chan, [])
        k = 0
        while (
            k < len(ss)
            and k < len(rs)
            and ss[k][1].state == "completed"
            and rs[k][1].state == "completed"
        ):
            dropped.add((ss[k][0], ss[k][1].pos))
            dropped.add((rs[k][0], rs[k][1].pos))
            k += 1


def _p2p_peer(e: _Entry, pg_ranks: tuple[int, ...]) -> int | None:
    """Global peer of a `send a->b` / `recv a<-b` entry (group-local ranks in the name)."""
    if not e.detail:
        return None
    sep = "->" if e.raw == "send" else "<-"
    if sep not in e.detail:
        return None
    text = e.detail.split(sep)[1].strip()
    if not text.isdigit() or len(text) > 9:
        return None
    local_peer = int(text)
    if not 0 <= local_peer < len(pg_ranks):
        return None
    return pg_ranks[local_peer]
