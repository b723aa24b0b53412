"""Rank classes through torch's own parallel modules (`tracked_modules.py`) and values ranks
send each other (`classes.record_by_class`): each value that used to pin the rank, its
expression now, and the values that must still pin."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from commlint.graph.check import check_trace
from commlint.plans.dryrun import classes, tracked, tracked_modules
from commlint.plans.dryrun.merge import locate_at_site
from commlint.plans.dryrun.rankexpr import ClassRecord, Evaluator
from commlint.trace import Action

PROGRAMS = Path(__file__).parent / "module_programs"
MODULES = PROGRAMS / "bad_fsdp_tp_pp_stage_first_rank.py"
CHAIN = PROGRAMS / "bad_value_chain.py"
REVERSE = PROGRAMS / "bad_reverse_chain.py"


def record(
    program: Path,
    world: int,
    classes_on: bool = True,
    args=(),
    device: str = "cpu",
    nproc: int | None = None,
    jobs: int = 2,
):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(program),
        args=list(args),
        world_size=world,
        nproc_per_node=nproc or world,
        ranks=list(range(world)),
        timeout=120,
        jobs=jobs,
        device=device,
        rank_classes=classes_on,
    )
    result = dry_run(options)
    return result, result.trace(options)


def errors(trace):
    found = check_trace(trace, None).findings
    for f in found:
        locate_at_site(f, trace)
    return [f for f in found if f.severity == "error"]


@pytest.fixture
def state():
    tracked.STATE = tracked._State(37, 64, 8)
    try:
        yield tracked.STATE
    finally:
        tracked.STATE = None


def test_a_grid_mesh_gives_coordinates_and_any_other_mesh_none():
    # torchtitan's mesh: rank x at ((x // stride) % size) on every dimension
    mesh = torch.arange(64).reshape(1, 2, 4, 8)
    assert tracked_modules.grid(mesh, 64) == ((1, 1), (32, 2), (8, 4), (1, 8))
    # dp outermost but tp interleaved: still a grid, with its own strides
    assert tracked_modules.grid(torch.arange(16).reshape(4, 4).t(), 16) == ((1, 4), (4, 4))
    # a permuted mesh, a mesh of part of the world, a repeated rank: no expression
    assert tracked_modules.grid(torch.tensor([[0, 2], [1, 3]]).flip(0), 4) is None
    assert tracked_modules.grid(torch.arange(8).reshape(2, 4), 16) is None
    assert tracked_modules.grid(torch.tensor([[0, 1], [1, 3]]), 4) is None


def test_the_stage_map_answers_a_tracked_stage_with_its_expression(state):
    stage = tracked.RankValue("(r//16)", 2)
    plain = {i: i % 4 for i in range(8)}
    m = tracked_modules.StageMap(plain)
    peer = m[stage + 1]  # the next stage's place in the pp group: no hash of the rank
    assert tracked.expr_of(peer) == "((((r//16)+1))%4)" and tracked.plain(peer) == 3
    assert m.get(stage + 6) is None  # past the last stage
    conds = list(state.conds)
    assert "0 <= (((r//16)+1)) < 8" in conds and "not (0 <= (((r//16)+6)) < 8)" in conds
    assert not [c for c in conds if c.startswith("(((r//16)+1)) ==")]  # nothing pinned
    ev = Evaluator(ClassRecord(conds=conds))
    assert [x for x in range(64) if ev.holds(x)] == list(range(32, 64))  # stages 2 and 3
    # a map that is not `stage % size` pins the key, as any dict does
    odd = tracked_modules.StageMap({0: 1, 1: 0})
    assert odd[tracked.RankValue("(r%2)", 1)] == 0
    assert "((r%2)) == 1" in state.conds


def test_an_index_into_equal_paddings_is_plain_and_into_unequal_ones_pins(state):
    idx = tracked.RankValue("(r%8)", 5)
    assert tracked_modules._uniform_index([0] * 8, idx) == 5
    assert "0 <= ((r%8)) < 8" in state.conds
    assert tracked_modules._uniform_index([0, 0, 0, 0, 0, 0, 0, 1], idx) is idx  # pins later


def test_fsdp2_tp_and_pipelining_derive_ranks_and_find_the_stage_first_rank():
    """Before: FSDP2's shard index, DeviceMesh's `(mesh == rank)`, DTensor's padding index
    and pipelining's stage map pinned the rank (every rank recorded), and the pipeline's
    vote, a value sent between stages, made every rank be recorded."""
    args = ("--pp", "2", "--dp", "4", "--tp", "2")
    result, trace = record(MODULES, 16, args=args)
    assert len(result.derived) >= 4, result.notes
    assert 8 not in result.derived  # the first rank of stage 1 takes a path of its own
    found = errors(trace)
    assert [(f.code, f.line) for f in found][:1] == [("CL202", 74)]
    assert "rank 8 waits in all_reduce(g8_9)" in found[0].message
    every, _ = record(MODULES, 16, classes_on=False, args=args)
    for r in range(16):
        a, b = result.runs[r], every.runs[r]
        assert (a.actions, a.groups, a.end) == (b.actions, b.groups, b.end), r


def test_uneven_fsdp2_shards_still_pin_the_rank():
    """3 rows over dp 2: shards of 2 and 1 rows. The shard index must pin, or the ranks with
    the short shard (and the all-reduce only they issue) would be derived from a long one."""
    result, trace = record(MODULES, 8, args=("--uneven",))
    assert [(f.code, f.line) for f in errors(trace)][:1] == [("CL202", 72)]
    short = [r for r in range(8) if (r // 2) % 2 == 1]  # dp coordinate 1
    assert not [r for r in short if result.derived.get(r) not in (None, *short)]


def test_values_exchanged_are_checked_against_what_every_rank_sent(monkeypatch):
    """A chain of values (rank k receives k from rank k-1): every rank's path looks alike but
    what it receives is not an expression of its rank. The check of every read against what
    every rank sent records the ranks that read otherwise, and finds rank 5's extra call."""
    result, trace = record(CHAIN, 8)
    found = errors(trace)
    assert [f.code for f in found][:1] == ["CL203"]  # all_reduce on rank 5, barrier on the rest
    assert "all_reduce(WORLD) on rank 5." in found[0].message
    assert 5 not in result.derived
    # Without the check, rank 1 would stand for ranks 2-6 and the bug would be missed.
    monkeypatch.setattr(classes, "_stale", lambda runs, table: [])
    unsound, trace = record(CHAIN, 8)
    assert 5 in unsound.derived
    assert not errors(trace)


def test_a_pipeline_stage_not_covered_yet_is_assumed_not_pulled_with_every_stage():
    """The pipeline's warm-up vote passes a value up through every stage and back. On the
    `cuda` target each local rank (here the tp coordinate) is a class of its own; before, a
    rank of local rank 1 waiting for the next stage pulled it into its pass, which pulled the
    next, so every stage of local rank 1 was recorded (12 of 12). Now a sender not covered
    yet is assumed to send what a recorded run re-evaluated at it sends (checked after):
    local rank 1's middle stages 2-4 are one class, recorded once."""
    args = ("--pp", "6", "--dp", "1", "--tp", "2")
    result, trace = record(MODULES, 12, args=args, device="cuda", nproc=2, jobs=1)
    assert result.derived == {7: 5, 9: 5}, result.notes
    # the mesh's groups, made by every rank alike: one list, not a copy per derived rank
    assert result.runs[7].creations is result.runs[5].creations
    # a derived rank's actions in the trace: copies of the recorded ones with the relabelled
    # group and peers, equal to validating its actions afresh
    for r in (7, 9):
        fresh = [Action.model_validate(a) for a in result.runs[r].actions]
        assert trace.ranks[r] == fresh
        dumped = [a.model_dump(exclude_unset=True, by_alias=True) for a in trace.ranks[r]]
        assert dumped == [a.model_dump(exclude_unset=True, by_alias=True) for a in fresh]
    found = errors(trace)
    assert [(f.code, f.line) for f in found][:1] == [("CL202", 74)]
    assert "rank 2 waits in all_reduce(g2_3)" in found[0].message
    every, _ = record(MODULES, 12, classes_on=False, args=args, device="cuda", nproc=2, jobs=1)
    for r in range(12):
        a, b = result.runs[r], every.runs[r]
        assert (a.actions, a.groups, a.end) == (b.actions, b.groups, b.end), r


def test_an_assumed_message_that_was_wrong_is_recorded_again(monkeypatch):
    """Rank 1 waits for rank 3 before rank 3 is covered, and is first given what the even
    chain's rank 2 sends at the same place (3); rank 3 really sends 12. The check of every
    read against what every rank sent records rank 1 again, and its extra all-reduce (it
    receives 12) is found; a rank found to read otherwise is then run with its senders, not
    assumed again (or the same guess would come back every round)."""
    result, trace = record(REVERSE, 8, jobs=1)
    found = errors(trace)
    assert [f.code for f in found][:1] == ["CL203"]
    assert "all_reduce(WORLD) on rank 1." in found[0].message
    assert 1 not in result.derived
    monkeypatch.setattr(classes, "_stale", lambda runs, table: [])
    _, trace = record(REVERSE, 8, jobs=1)
    assert not errors(trace)  # the assumption, unchecked, would hide it
