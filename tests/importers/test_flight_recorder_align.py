"""The Flight Recorder alignment works a process group at a time and compares whole runs of
entries (`_aligned_entries`); here it is checked against the plain entry-by-entry rule on
random dumps: many groups (more than the eight split one pass each), ring-buffer evictions,
coalesced entries (one seq twice), markers, sizes that differ, states that stop completing."""

from __future__ import annotations

import random

import pytest

from commlint.plans.importers.flight_recorder import MARKERS, _aligned_entries, _checked_dump

RAWS = ["all_reduce", "all_reduce", "all_gather", "broadcast", "coalesced"]


def random_dumps(rng: random.Random) -> dict[int, dict]:
    world = rng.choice([2, 3, 4])
    groups = [f"g{k}" for k in range(rng.choice([1, 2, 3, 9, 12]))]
    plan = [(rng.choice(groups), rng.choice(RAWS)) for _ in range(rng.randint(1, 40))]
    dumps = {}
    for r in range(world):
        seq = dict.fromkeys(groups, 0)
        rows = []
        stop = rng.randint(0, len(plan))
        for i, (g, raw) in enumerate(plan):
            if rng.random() < 0.05:
                raw = rng.choice(RAWS)
            if not (rng.random() < 0.08 and seq[g] > 0):  # else: the same seq again (coalesced)
                seq[g] += 1
            size = [[rng.choice([4, 4, 4, 8])]]
            state = "completed" if i < stop else rng.choice(["started", "scheduled", "completed"])
            rows.append(
                {
                    "record_id": i,
                    "profiling_name": f"nccl:{raw}",
                    "process_group": (g, "d"),
                    "collective_seq_id": seq[g],
                    "p2p_seq_id": 0,
                    "state": state,
                    "is_p2p": False,
                    "input_sizes": size,
                    "output_sizes": size,
                    "input_dtypes": ["Float"],
                    "output_dtypes": ["Float"],
                    "frames": [],
                }
            )
        dumps[r] = {"entries": rows[rng.choice([0, 0, 1, 3]) :]}  # evicted from the ring
    return dumps


def reference(per_rank: dict, keep_completed: bool):
    """Entry by entry: windows and done marks per group, the first entry of each (group, seq),
    and the entries that differ from it (or repeat the seq of the rank's previous one in that
    group: a coalesced collective)."""
    rows = {
        r: list(zip(c.group, c.seq, c.state, c.raw, c.payload, strict=True))
        for r, c in per_rank.items()
    }
    start: dict[str, int] = {}
    done: dict[str, int] = {}
    for entries in rows.values():
        first: dict[str, int] = {}
        leading: dict[str, int] = {}
        broken: set[str] = set()
        for g, seq, state, _, _ in entries:
            first.setdefault(g, seq)
            if g not in broken and state == "completed":
                leading[g] = seq
            else:
                broken.add(g)
        for g, seq in first.items():
            start[g] = max(start.get(g, seq), seq)
            last = leading.get(g, seq - 1)
            done[g] = min(done.get(g, last), last)
    first_of: dict[tuple[str, int], tuple] = {}
    differ: set[tuple[str, int]] = set()
    kept: dict[int, list[int]] = {}
    for r, entries in rows.items():
        previous: dict[str, int] = {}
        out = []
        for i, (g, seq, _, raw, payload) in enumerate(entries):
            if seq < start[g]:
                continue
            if raw not in MARKERS:
                f = first_of.get((g, seq))
                if f is None:
                    first_of[(g, seq)] = payload
                elif previous.get(g) == seq or payload != f:
                    differ.add((g, seq))
                previous[g] = seq
            if keep_completed or seq > done[g]:
                out.append(i)
        kept[r] = out
    return kept, differ, first_of


@pytest.mark.parametrize("seed", range(6))
def test_group_runs_align_as_entry_by_entry(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        dumps = random_dumps(rng)
        keep = rng.random() < 0.3
        payloads: dict[bytes, tuple] = {}
        per_rank = {}
        for r, d in dumps.items():
            cols, _, _ = _checked_dump(d, f"rank_{r}", payloads=payloads)
            cols.group = list(cols.pg)
            per_rank[r] = cols
        kept, _, colls = _aligned_entries(per_rank, None, keep)  # type: ignore[arg-type]
        want_kept, want_differ, want_first = reference(per_rank, keep)
        assert kept == want_kept
        assert colls.differ == want_differ
        assert dict(colls.first_items()) == want_first
