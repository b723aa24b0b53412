"""No silent verdicts on malformed input (issue 32): what a reader cannot read is a located
error naming the file (and the rank), never a pass and never "this rank wrote no dump"."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from test_flight_recorder_hostile import dump, good_entry

from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import load_flight_recorder
from commlint.plans.io import loads_trace

RANKS = "ranks:\n  0: [{op: send, peer: 1}]\n  1: [{op: send, peer: 0}]\n"


@pytest.mark.parametrize(
    "plan, key, line",
    [
        (f"version: 1\nworld_size: 2\n{RANKS}generate: {{degrees: {{dp: 2}}}}\n", "world_size", 2),
        (f"version: 1\ngenerate: {{degrees: {{dp: 2}}}}\n{RANKS}", "ranks", 3),
        ("version: 1\ngenerate: {degrees: {dp: 2}}\nnotes: tp later\n", "notes", 3),
    ],
    ids=["ranks-first", "generate-first", "unknown-key"],
)
def test_generate_with_other_top_level_keys_is_an_error(plan: str, key: str, line: int) -> None:
    with pytest.raises(CommlintInputError) as info:
        loads_trace(plan, path="p.yaml")
    assert info.value.error.line == line
    assert info.value.error.message.startswith(f"'{key}' cannot be given with 'generate'")


def test_a_deadlocked_ranks_block_beside_generate_is_never_a_pass(tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"version: 1\nworld_size: 2\n{RANKS}generate: {{degrees: {{dp: 2}}}}\n")
    assert main(["plan", str(plan)]) == 2
    assert "All checks passed" not in capsys.readouterr().out


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump([good_entry()])))
    return folder


@pytest.mark.parametrize("keep", [0, 2, 40], ids=["empty", "magic-only", "cut"])
def test_a_truncated_rank_dump_is_a_located_error_naming_the_rank(tmp_path, keep) -> None:
    folder = _folder(tmp_path)
    last = folder / "nccl_trace_rank_1"
    last.write_bytes(last.read_bytes()[:keep])
    with pytest.raises(CommlintInputError) as info:
        load_flight_recorder(folder)
    assert info.value.error.path == str(last)
    assert info.value.error.message.startswith("rank 1: ")


def test_a_truncated_dump_is_never_no_dump_on_the_command_line(tmp_path, capsys) -> None:
    folder = _folder(tmp_path)
    (folder / "nccl_trace_rank_1").write_bytes(b"")
    assert main(["plan", str(folder)]) == 2
    out = capsys.readouterr()
    assert "nccl_trace_rank_1: rank 1: empty file" in out.err
    assert "no dump" not in out.out + out.err


@pytest.mark.parametrize(
    "version, kind",
    [([[[]]] * 3, "a list"), ({"v": 2}, "a dict"), (True, "a boolean")],
    ids=["nested-list", "dict", "bool"],
)
def test_a_version_of_the_wrong_type_is_an_error_not_a_pass(tmp_path, capsys, version, kind):
    folder = _folder(tmp_path)
    shared: list = []
    for _ in range(50):  # deeply nested and shared, as a hostile pickle would make it
        shared = [shared, shared]
    value = shared if kind == "a list" else version
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump([good_entry()], version=value)))
    assert main(["plan", str(folder)]) == 2
    out = capsys.readouterr()
    assert f"nccl_trace_rank_0: 'version' is {kind}, not a version string" in out.err
    assert "All checks passed" not in out.out
    (folder / "nccl_trace_rank_0").write_text(json.dumps(dump([good_entry()], version=version)))
    with pytest.raises(CommlintInputError, match=f"'version' is {kind}"):
        load_flight_recorder(folder)
