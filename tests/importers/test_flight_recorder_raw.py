"""Raw gloo Flight Recorder dumps, as torch 2.13 writes them: membership is never guessed.

`flight_fixtures/raw_gloo/` was written by our own `flight_raw_gloo.py` (two ranks, two
groups all-reduced in opposite orders, each rank dumping on its timeout): `pg_config` is empty,
every entry `scheduled`. The `real` test regenerates them with gloo and checks the same.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from commlint import check
from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import load_flight_recorder
from commlint.plans.importers.flight_recorder import read_groups_option

HERE = Path(__file__).resolve().parent
RAW = HERE / "flight_fixtures" / "raw_gloo"
GROUPS = '{"WORLD": [0, 1], "1": [0, 1], "2": [0, 1]}'


def _source_line(site: str) -> str:
    path, _, line = site.rpartition(":")
    return Path(path).read_text().splitlines()[int(line) - 1].strip()


def _assert_unknown_groups(err: str, folder: Path, suffix: str = "") -> None:
    first = f"{folder / ('rank_0' + suffix)}: process group members are not in the dumps"
    assert first in err
    assert "'0' (default_pg, first used by rank 0 in entry 0)" in err
    assert "'1' (first used by rank 0 in entry 1)" in err
    assert f"'2' (first used by rank 1 in entry 1 of rank_1{suffix})" in err
    assert """--groups '{"WORLD": [...], "1": [...], "2": [...]}'""" in err


@pytest.mark.parametrize("kind", ["pickle", "json"])
def test_raw_dumps_without_groups_exit_2_naming_what_is_missing(kind, capsys):
    folder = RAW / kind
    assert main(["plan", str(folder)]) == 2
    captured = capsys.readouterr()
    _assert_unknown_groups(captured.err, folder, ".json" if kind == "json" else "")
    assert "All checks passed" not in captured.out + captured.err
    assert "Traceback" not in captured.err


def test_raw_dumps_with_groups_find_the_cycle_at_the_source_lines(tmp_path, capsys):
    folder = RAW / "pickle"
    groups_file = tmp_path / "groups.yaml"
    groups_file.write_text("groups:\n  WORLD: [0, 1]\n  '1': [0, 1]\n  '2': [0, 1]\n")
    for groups in (GROUPS, str(groups_file)):
        assert main(["plan", str(folder), "--groups", groups, "--format", "json"]) == 1
        out = json.loads(capsys.readouterr().out)
        (found,) = out["findings"]
        assert found["code"] == "CL201"
        assert [(e["rank"], e["group"]) for e in found["cycle"]] == [(0, "pg1"), (1, "pg2")]
        sites = [e["site"] for e in found["cycle"]]
        assert [_source_line(s) for s in sites] == [
            "dist.all_reduce(x, group=a)",
            "dist.all_reduce(x, group=b)",
        ]
        # the finding sits on the user's line, not on the dump folder
        assert f"{found['path']}:{found['line']}" == sites[0]
        assert {r["path"] for r in found["related"]} == {
            str(folder / "rank_0"),
            str(folder / "rank_1"),
        }


def test_raw_json_dumps_have_no_frames_but_the_same_cycle():
    trace = load_flight_recorder(RAW / "json", groups=json.loads(GROUPS))
    findings = check(trace, None).findings
    assert [f.code for f in findings] == ["CL201"]
    assert trace.backend == "gloo" and trace.meta["flight_recorder"]["states_recorded"] is False


def test_groups_that_leave_one_out_still_exit_2(capsys):
    assert main(["plan", str(RAW / "pickle"), "--groups", '{"WORLD": [0, 1], "1": [0, 1]}']) == 2
    err = capsys.readouterr().err
    assert f"{RAW / 'pickle' / 'rank_1'}: process group members" in err
    assert "'2' (first used by rank 1 in entry 1)" in err
    assert "the groups given do not name them" in err
    assert "'1' (" not in err


def test_groups_that_exclude_the_rank_using_them_are_located(capsys):
    bad = '{"WORLD": [0, 1], "1": [1], "2": [0, 1]}'
    assert main(["plan", str(RAW / "pickle"), "--groups", bad]) == 2
    err = capsys.readouterr().err
    assert (
        f"{RAW / 'pickle' / 'rank_0'}: entry 1: process group '1' has members [1], which do "
        "not include this rank (0)"
    ) in err


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "--groups: not JSON or YAML"),
        ('{"1": [0, "x"]}', "--groups: group '1' must be a list of global ranks"),
        ('{"1": [0, 0]}', "--groups: group '1': a rank is listed twice"),
        ("[0, 1]", "--groups: cannot read"),
        ('{"1": 3}', "--groups: group '1' must be a list of global ranks"),
    ],
)
def test_bad_groups_option_is_one_located_line(value, message, capsys):
    with pytest.raises(CommlintInputError, match="--groups"):
        read_groups_option(value)
    assert main(["plan", str(RAW / "pickle"), "--groups", value]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_groups_file_names_the_file(tmp_path, capsys):
    f = tmp_path / "groups.json"
    f.write_text("[1, 2]")
    assert main(["plan", str(RAW / "pickle"), "--groups", str(f)]) == 2
    assert f"{f}: --groups: expected an object" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.real
def test_real_gloo_run_writes_the_same_raw_dumps(tmp_path, capsys):
    """Regenerate the fixture with a real 2-rank gloo hang (~10 s) and check it the same way."""
    script = tmp_path / "flight_raw_gloo.py"
    shutil.copy(HERE / "flight_raw_gloo.py", script)
    subprocess.run(
        ["nice", "-n", "10", sys.executable, str(script), str(tmp_path / "out"),
         str(_free_port())],
        check=True, timeout=240, capture_output=True,
        env={**os.environ, "TORCH_FR_BUFFER_SIZE": "2000"},
    )  # fmt: skip
    for kind in ("pickle", "json"):
        folder = tmp_path / "out" / kind
        raw = json.loads((folder.parent / "json" / "rank_0.json").read_text())
        assert raw["pg_config"] == {"": {"desc": "", "name": "", "ranks": "[]"}}
        assert main(["plan", str(folder)]) == 2
        _assert_unknown_groups(capsys.readouterr().err, folder, ".json" if kind == "json" else "")
        assert main(["plan", str(folder), "--groups", GROUPS, "--format", "json"]) == 1
        (found,) = json.loads(capsys.readouterr().out)["findings"]
        assert found["code"] == "CL201"
    trace = load_flight_recorder(tmp_path / "out" / "pickle", groups=json.loads(GROUPS))
    sites = [a.site for r in (0, 1) for a in trace.ranks[r]]
    assert sites[1].startswith(str(script)) and sites[3].startswith(str(script))


def test_sarif_result_sits_on_the_source_line_with_the_dumps_related(capsys):
    """Issue 15: GitHub code scanning annotates the user's call, not the dump folder."""
    folder = RAW / "pickle"
    assert main(["plan", str(folder), "--groups", GROUPS, "--format", "sarif"]) == 1
    (result,) = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"].endswith("tests/importers/flight_raw_gloo.py")
    line = where["region"]["startLine"]
    source = (HERE / "flight_raw_gloo.py").read_text().splitlines()
    assert source[line - 1].strip() == "dist.all_reduce(x, group=a)"
    related = {r["message"]["text"] for r in result["relatedLocations"]}
    assert {"rank 0: Flight Recorder entry 1", "rank 1: Flight Recorder entry 1"} <= related
