"""CL212: members that name a process group differently (torch names groups by counting
`new_group` calls). The real runs of `programs/bad_member_only_group.py` and
`programs/ok_member_groups.py` (test_agreement.py) show the hang and the clean run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_server import run_commlint

from commlint.graph import check_trace
from commlint.trace import Trace

PROGRAMS = Path(__file__).parent / "programs"


def _trace(creations: dict[int, list[tuple[str, list[int], str]]], world: int = 4) -> Trace:
    return Trace(
        world_size=world,
        meta={
            "group_creations": {
                str(r): [{"name": n, "ranks": rs, "site": s} for n, rs, s in items]
                for r, items in creations.items()
            }
        },
    )


def _cl212(trace: Trace) -> list:
    return [f for f in check_trace(trace, "gloo").findings if f.code == "CL212"]


def test_a_skipped_call_is_one_finding_at_the_first_renamed_group():
    # Ranks 0 and 1 create [0, 1] only for themselves; then all create [0..3] and [1, 2].
    every = [("2", [0, 1, 2, 3], "t.py:9"), ("3", [1, 2], "t.py:10")]
    members = [("1", [0, 1], "t.py:8"), *every]
    others = [("1", [0, 1, 2, 3], "t.py:9"), ("2", [1, 2], "t.py:10")]
    found = _cl212(_trace({0: members, 1: members, 2: others, 3: others}))
    assert len(found) == 1
    f = found[0]
    assert (f.path, f.line, f.severity) == ("t.py", 9, "error")
    assert "[0, 1, 2, 3]" in f.message and "'2'" in f.message and "'1'" in f.message
    assert "part at call #1" in f.message and "t.py:8" in f.message
    assert "1 later group is named differently" in f.message
    assert f.fix and "use_local_synchronization=True" in f.fix


def test_every_rank_creating_every_group_is_clean():
    calls = [("1", [0, 1], "t.py:8"), ("2", [2, 3], "t.py:8"), ("3", [0, 1, 2, 3], "t.py:9")]
    assert _cl212(_trace({r: calls for r in range(4)})) == []


def test_member_only_groups_with_hashed_names_are_clean():
    # use_local_synchronization=True: only members call, the name is a hash of the members.
    a = ("h01", [0, 1], "t.py:8")
    b = ("h23", [2, 3], "t.py:8")
    assert _cl212(_trace({0: [a], 1: [a], 2: [b], 3: [b]})) == []


def test_a_member_that_never_creates_the_group():
    found = _cl212(_trace({0: [("h01", [0, 1], "t.py:8")], 1: []}, world=2))
    assert len(found) == 1 and "member 1 never creates it" in found[0].message


def test_two_groups_under_one_name_collide():
    # Each pair builds only its own group, both as "1": one store prefix for two groups.
    found = _cl212(_trace({0: [("1", [0, 1], "t.py:8")], 2: [("1", [2, 3], "t.py:8")]}, world=4))
    assert len(found) == 1 and "under the name '1'" in found[0].message


def test_ranks_not_recorded_are_not_blamed():
    # A part of a split run: rank 1's calls are in another file.
    assert _cl212(_trace({0: [("1", [0, 1], "t.py:8")]}, world=2)) == []


def test_dry_run_reports_it_and_the_saved_trace_keeps_it(tmp_path):
    program = PROGRAMS / "bad_member_only_group.py"
    saved = tmp_path / "trace"
    run = ["run", "--nproc-per-node", "2"]
    out = run_commlint(
        [*run, "--save-trace", str(saved), "--format", "concise", str(program)], timeout=600
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "programs/bad_member_only_group.py:11:1: CL212" in out.stdout
    plan = subprocess.run(
        [sys.executable, "-m", "commlint", "plan", "--format", "concise", str(saved)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "programs/bad_member_only_group.py:11:1: CL212" in plan.stdout


def _mesh_creations(shape: tuple[int, ...], dims: list[tuple[int, ...]]) -> list[dict]:
    """Every group of a contiguous mesh of `shape` along each tuple of dimensions in `dims`,
    in init_device_mesh's order: what every rank creates, named by torch's counter."""
    import itertools

    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    made = []
    for along in dims:
        rest = [d for d in range(len(shape)) if d not in along]
        for fixed in itertools.product(*(range(shape[d]) for d in rest)):
            base = sum(c * strides[d] for c, d in zip(fixed, rest, strict=True))
            inner = itertools.product(*(range(shape[d]) for d in along))
            ranks = sorted(base + sum(c * strides[d] for c, d in zip(cs, along, strict=True))
                           for cs in inner)  # fmt: skip
            made.append({"name": str(len(made) + 1), "ranks": ranks, "site": "t.py:9"})
    return made


def test_a_4096_rank_mesh_shared_by_every_rank_is_checked_by_its_members_not_ranks_x_groups():
    """torchtitan's mesh at 4,096 ranks (pp 8 x dp_shard 32 x cp 2 x tp 8, and dp_shard x cp
    flattened): each rank creates all 3,264 groups. Rank classes give derived ranks their
    recorded rank's list itself; the check reads a shared list once, for its members (the
    lists' members, ~20,000), not ranks x creations (13 million: a minute and gigabytes
    before). Rank 1,536, which skips one creation, is still found."""
    import time

    shape = (8, 32, 2, 8)
    every = _mesh_creations(shape, [(3,), (2,), (1,), (0,), (1, 2)])
    assert len(every) == 3264
    skipped = [c for c in every if c["ranks"] != list(range(1536, 1544))]  # its tp group
    skipped = [{**c, "name": str(i + 1)} for i, c in enumerate(skipped)]
    creations = {str(r): every for r in range(4096)}
    creations["1536"] = skipped
    trace = Trace(world_size=4096, meta={"group_creations": creations})
    start = time.process_time()
    found = _cl212(trace)
    spent = time.process_time() - start
    assert len(found) == 1 and 1536 in found[0].ranks, found
    assert "member 1536 never creates it" in found[0].message
    assert spent < 5, spent  # 0.05 CPU s; before, minutes and gigabytes
