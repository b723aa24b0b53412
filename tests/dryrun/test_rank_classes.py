"""`commlint run --rank-classes`: one recorded run per program path, the other ranks derived
(`tracked.py`, `rankexpr.py`, `classes.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_server import run_commlint

from commlint.graph.check import check_trace
from commlint.plans.dryrun import tracked
from commlint.plans.dryrun.merge import locate_at_site
from commlint.plans.dryrun.rankexpr import ClassRecord, Evaluator

PROGRAMS = Path(__file__).parent / "programs"
# programs whose bugs show at the world sizes rank classes are for (not the W=2 agreements of
# `programs/`, which every file there must keep with real gloo)
CLASS_PROGRAMS = Path(__file__).parent / "class_programs"
STAGES = CLASS_PROGRAMS / "bad_stage_first_rank_classes.py"
INDEXES = CLASS_PROGRAMS / "bad_rank_indexes_data.py"
TITAN = Path(__file__).parents[2] / "bench" / "titan_layout.py"


def record(program: Path, world: int, classes: bool = True, args=(), device="cpu"):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(program),
        args=list(args),
        world_size=world,
        nproc_per_node=8,
        ranks=list(range(world)),
        timeout=60,
        jobs=2,
        device=device,
        rank_classes=classes,
    )
    result = dry_run(options)
    return result, result.trace(options)


def test_rank_value_tests_add_to_the_path_condition_and_escapes_pin_the_value():
    tracked.STATE = tracked._State(37, 64, 8)
    try:
        r = tracked.RankValue("r", 37)
        stage = r // 16
        assert isinstance(r, int) and type(stage) is tracked.RankValue
        assert stage == 2 and r % 16 != 0
        peer = r + 16  # arithmetic stays an expression: no condition
        assert [10, 20, 30, 40][stage] == 30  # an index: the stage is pinned
        conds = list(tracked.STATE.conds)
        assert conds == ["((r//16)) == (2)", "((r%16)) != (0)", "((r//16)) == 2"]
        assert tracked.expr_of(peer) == "(r+16)"
        assert {r: 1}[37] == 1  # a hash pins the whole rank
        assert "(r) == 37" in tracked.STATE.conds
    finally:
        tracked.STATE = None
    ev = Evaluator(ClassRecord(conds=conds))
    assert [x for x in range(64) if ev.holds(x)] == list(range(33, 48))


def test_few_recorded_runs_and_the_first_rank_of_one_stage_found():
    result, trace = record(STAGES, 64)
    derived = result.derived
    assert len(derived) >= 48  # a handful of runs cover 64 ranks
    assert 32 not in derived  # the first rank of stage 2 takes a path of its own
    assert derived[47] in range(33, 48)
    # a derived rank's peers and groups are its own, not its recorded rank's
    recv, send = (next(a for a in trace.ranks[47] if a.op == op) for op in ("recv", "send"))
    assert (recv.peer, send.peer, recv.group) == (31, 63, "WORLD")
    assert trace.groups["g32-47"] == list(range(32, 48))
    assert trace.meta["rank_classes"] == {"recorded": 64 - len(derived), "derived": len(derived)}
    findings = check_trace(trace, None).findings
    for f in findings:
        locate_at_site(f, trace)
    assert [(f.code, f.line) for f in findings if f.severity == "error"][:1] == [("CL203", 22)]
    assert "barrier(g32-47) on rank 32; all_reduce(g32-47) on ranks 33" in findings[0].message


@pytest.mark.parametrize(
    ("program", "world", "args", "device"),
    [
        (STAGES, 16, (), "cpu"),
        # torchtitan's layout, groups made by their members only: torch names each group by
        # a hash of its members, which a derived rank's creations must carry (CL212)
        (TITAN, 32, ("--pp", "2", "--dp-shard", "2", "--cp", "2", "--tp", "4"), "cuda"),
        # `1 - rank` is a valid peer on ranks 0 and 1 only; past them torch raises and the
        # dry-run counts from the end: rank 0 proves nothing about ranks 2-7
        (PROGRAMS / "bad_pipeline_send_send.py", 8, (), "cpu"),
        # init_device_mesh: coordinates and groups as expressions of the rank
        (CLASS_PROGRAMS / "bad_mesh_stage_first_rank.py", 16, (), "cpu"),
        # a receive's source, read back from its work, is the rank's expression too
        (CLASS_PROGRAMS / "bad_irecv_source_rank.py", 8, (), "cpu"),
    ],
    ids=["stages", "titan-layout", "peer-outside-world", "device-mesh", "irecv-source"],
)
def test_derived_traces_are_the_traces_recording_every_rank_gives(program, world, args, device):
    classes, _ = record(program, world, args=args, device=device)
    every, _ = record(program, world, classes=False, args=args, device=device)
    assert classes.derived and not every.derived
    for r in range(world):
        a, b = classes.runs[r], every.runs[r]
        assert (a.actions, a.groups, a.creations, a.end) == (
            b.actions,
            b.groups,
            b.creations,
            b.end,
        )


def test_the_rank_as_an_index_records_those_ranks_themselves(monkeypatch):
    result, trace = record(INDEXES, 8)
    assert result.derived == {}  # `sizes[rank]` pins each rank: no rank proves another
    assert [f.code for f in check_trace(trace, None).findings if f.severity == "error"] == ["CL204"]
    # With the escape not pinned (the soundness check off), rank 0 would stand for rank 5
    # and the size mismatch would be missed: the check is what finds it.
    monkeypatch.setattr(tracked.RankValue, "__index__", lambda self: self._v)
    unsound, trace = record(INDEXES, 8)
    assert 5 in unsound.derived
    assert not [f for f in check_trace(trace, None).findings if f.severity == "error"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_verdict_says_how_many_ranks_were_recorded_and_derived(fmt, tmp_path):
    out = run_commlint(
        ["run", "--device", "cpu", "--nnodes", "2",
         "--nproc-per-node", "8", "--rank-classes", "-j", "2", "--format", fmt, str(STAGES)],
        timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    if fmt == "json":
        ranks = json.loads(out.stdout)["summary"]["ranks"]
        assert ranks["recorded"] + ranks["derived"] == 16 and ranks["derived"] >= 6
    else:
        assert "recorded, " in out.stdout.splitlines()[-1]
        assert out.stdout.splitlines()[-1].endswith("derived.")
