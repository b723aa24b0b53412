"""SARIF / GitHub locations of `run` and Flight Recorder findings: every location has a full
region, related locations included; a finding whose dumps name a source line points there.
SARIF is validated against the official 2.1.0 schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from commlint.cli import main

RUN_SARIF = ["run", "--format", "sarif"]
SARIF_SCHEMA = Path("/work/shared/data/sarif-schema-2.1.0.json")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))
import fr_synth  # noqa: E402  (the importers' tests build their dumps with it)
from cli_server import run_commlint  # noqa: E402

TRAIN = """\
import torch.distributed as dist


def train_step(x, tp, dp):
    y = x * 2
    dist.all_reduce(y, group=tp)
    dist.all_reduce(y, group=dp)
    return y
"""

DRYRUN = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
if dist.get_rank() == 0:
    dist.all_reduce(t)
else:
    dist.barrier()
"""


def assert_valid_sarif(log: dict) -> None:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(log))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def full_region(physical: dict) -> dict:
    region = physical["region"]
    assert {"startLine", "startColumn", "endLine", "endColumn"} <= set(region), region
    return region


@pytest.fixture
def cross_group_dumps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two ranks all-reduce on tp and dp in opposite orders; the frames name train.py:6/7."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    src = str(tmp_path / "train.py")

    def rank(r: int, first: str, second: str) -> fr_synth.Rank:
        line = {"tp": 6, "dp": 7}
        dump = fr_synth.Rank(r)
        for g in (first, second):
            pg = "1" if g == "tp" else "2"
            dump.coll("all_reduce", pg=pg, desc=g, state="scheduled", line=line[g])
            dump.entries[-1]["frames"] = fr_synth.frames(line[g], file=src)
        return dump

    groups = {"0": ("default_pg", [0, 1]), "1": ("tp", [0, 1]), "2": ("dp", [0, 1])}
    return fr_synth.write(tmp_path / "dumps", [rank(0, "tp", "dp"), rank(1, "dp", "tp")], groups)


def test_flight_recorder_finding_points_at_the_source_line(cross_group_dumps, capsys):
    assert main(["plan", str(cross_group_dumps), "--format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    assert_valid_sarif(log)
    [result] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "CL201"]
    primary = result["locations"][0]["physicalLocation"]
    assert primary["artifactLocation"]["uri"] == "train.py"
    region = full_region(primary)
    assert (region["startLine"], region["startColumn"]) in {(6, 5), (7, 5)}
    assert region["endColumn"] == 5 + len("dist.all_reduce(y, group=tp)")
    lines = set()
    for rel in result.get("relatedLocations", []):
        physical = rel["physicalLocation"]
        if physical["artifactLocation"]["uri"] == "train.py":
            lines.add(full_region(physical)["startLine"])
    assert lines | {region["startLine"]} == {6, 7}  # the other rank's blocked call too

    assert main(["plan", str(cross_group_dumps), "--format", "github"]) == 1
    [annotation] = [a for a in capsys.readouterr().out.splitlines() if "CL201" in a.split("::")[1]]
    assert annotation.startswith("::error file=train.py,line=")
    assert ",col=5," in annotation and ",endColumn=" in annotation


@pytest.mark.timeout(240)
def test_run_findings_have_regions(tmp_path: Path):
    """A real dry-run: the result and each related action carry a full region."""
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_text(DRYRUN, encoding="utf-8")
    proc = run_commlint(
        [*RUN_SARIF, "--nproc-per-node", "2", "train.py"], cwd=tmp_path, timeout=200
    )
    assert proc.returncode == 1, proc.stderr
    log = json.loads(proc.stdout)
    assert_valid_sarif(log)
    [result] = log["runs"][0]["results"]
    assert result["ruleId"] == "CL203"
    assert "collective #1 on group 'WORLD'" in result["message"]["text"]
    primary = full_region(result["locations"][0]["physicalLocation"])
    assert (primary["startLine"], primary["startColumn"], primary["endColumn"]) == (
        7,
        5,
        5 + len("dist.all_reduce(t)"),
    )
    related = {full_region(r["physicalLocation"])["startLine"] for r in result["relatedLocations"]}
    assert 9 in related  # rank 1's barrier
