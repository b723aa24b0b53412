"""`--input-format auto`: which reader a path goes to, and mixed inputs in one run."""

from __future__ import annotations

import nnscaler_gen
import pytest
from fr_synth import Rank, write
from sketchdlc_gen import write_job

from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans import importers
from commlint.plans.importers import detect_format, load_any

PLAN = "version: 1\nworld_size: 2\nranks:\n  0: [{op: barrier}]\n  1: [{op: barrier}]\n"


@pytest.fixture
def inputs(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "a.yaml").write_text(PLAN)
    (plans / "b.json").write_text('{"version": 1, "world_size": 1, "ranks": {}}')
    fr = write(tmp_path / "fr", [Rank(0).coll("barrier"), Rank(1).coll("barrier")],
               {"0": ("default_pg", [0, 1])})  # fmt: skip
    fr_json = write(tmp_path / "frjson", [Rank(0).coll("barrier")], {}, as_json=True)
    nn = nnscaler_gen.tp_dp(tmp_path / "nn")
    csv = tmp_path / "s.csv"
    csv.write_text("0F0,0B0\n1F0,1B0\n")
    sk = write_job(tmp_path / "sk")
    return {
        "plan": plan,
        "plans": plans,
        "fr": fr,
        "fr_json_file": fr_json / "rank_0.json",
        "nn": nn,
        "nn_file": nn / "gencode0.py",
        "csv": csv,
        "sk": sk,
        "sk_file": sk / "worker_0.txt",
    }


def test_detect_format(inputs):
    expected = {
        "plan": "trace",
        "plans": "trace",
        "fr": "fr",
        "fr_json_file": "fr",
        "nn": "nnscaler",
        "nn_file": "nnscaler",
        "csv": "pipelining-csv",
        "sk": "sketchdlc",
        "sk_file": "sketchdlc",
    }
    assert {k: detect_format(p) for k, p in inputs.items()} == expected


def test_every_format_in_one_run(inputs, capsys):
    paths = [str(inputs[k]) for k in ("plan", "plans", "fr", "nn", "csv", "sk")]
    assert main(["plan", *paths, "--format", "concise"]) == 0
    assert "All checks passed (7 checked)." in capsys.readouterr().out


def test_forcing_the_wrong_format_is_a_located_error(inputs, capsys):
    code = main(["plan", str(inputs["plan"]), str(inputs["csv"]), "--input-format", "fr"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2  # one line per input, both inputs tried
    for line, key in zip(err, ("plan", "csv"), strict=True):
        assert line.startswith(f"commlint: error: {inputs[key]}: not a Flight Recorder dump")
    assert main(["plan", "missing.csv"]) == 2
    assert "missing.csv: no such file or directory" in capsys.readouterr().err


def test_load_any_and_the_python_api(inputs):
    assert load_any(inputs["csv"]).trace.source == "pipelining-csv (compute_only)"
    assert load_any(inputs["fr"], "fr").trace.source == "flight-recorder"
    assert importers.load_nnscaler(inputs["nn"]).world_size == 4
    assert importers.load_sketchdlc(inputs["sk"]).source == "sketchdlc"
    assert importers.load_pipelining_csv(inputs["csv"]).world_size == 2
    with pytest.raises(CommlintInputError, match="unknown input format 'xml'"):
        load_any(inputs["csv"], "xml")
    with pytest.raises(AttributeError):
        importers.load_nothing  # noqa: B018
