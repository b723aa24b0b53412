"""Fuzzing the plan readers (issue 13): mutated plan files (YAML and JSON), nnScaler gencode
and SketchDLC traces either load, and then get the same verdict on every run, or fail with one
located line (`CommlintInputError`) — never another exception. A batch of mutated files goes
through the CLI in a subprocess: no traceback, no signal, exit code in {0, 1, 2}.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlint.findings import CommlintInputError
from commlint.graph.check import check_trace
from commlint.plans.importers import load_any
from commlint.plans.io import loads_trace
from commlint.trace import Trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))
import nnscaler_gen
import sketchdlc_gen

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)

PLAN_YAML = """version: 1
world_size: 4
backend: nccl
groups:
  tp0: [0, 1]
  tp1: [2, 3]
ranks:
  0:
    - {op: all_reduce, group: tp0, shape: [4], dtype: float32}
    - {op: isend, peer: 2, handle: s, tag: 1}
    - {op: broadcast, root: 0, async: true, handle: b}
    - {op: wait, handles: [s, b]}
  1:
    - {op: all_reduce, group: tp0, shape: [4], dtype: float32}
    - {op: broadcast, root: 0}
  2:
    - {op: all_reduce, group: tp1, reduce_op: max}
    - {op: recv, peer: 0, tag: 1}
    - {op: broadcast, root: 0}
  3:
    - {op: all_reduce, group: tp1, reduce_op: sum}
    - {op: all_to_all, group: tp1, in_splits: [1, 1], out_splits: [1, 1]}
    - {op: broadcast, root: 0}
    - {op: sync}
ends:
  3: {kind: exception, message: boom, site: "t.py:9"}
"""

PLAN_JSON = json.dumps(
    {
        "version": 1,
        "world_size": 3,
        "groups": {"g": [0, 1]},
        "ranks": {
            "0": [{"op": "send", "peer": 1}, {"op": "all_gather", "group": "g"}],
            "1": [{"op": "recv", "peer": 0}, {"op": "all_gather", "group": "g"}],
            "2": [{"op": "barrier"}],
        },
    },
    indent=1,
)

# characters that change structure, types and numbers
ALPHABET = "{}[]:,-'\"&*!#|>\n 0123456789e.-truefalsnul" + "\t\\ûé"


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "insert", "duplicate", "swap"]))
        n = len(text)
        i = draw(st.integers(0, max(0, n - 1)))
        if kind == "delete":
            j = draw(st.integers(i, min(n, i + 12)))
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + draw(st.text(ALPHABET, min_size=1, max_size=6)) + text[i:]
        elif kind == "duplicate":
            lines = text.splitlines(keepends=True)
            k = draw(st.integers(0, max(0, len(lines) - 1)))
            text = "".join(lines[: k + 1] + lines[k:])
        else:
            j = draw(st.integers(0, max(0, n - 1)))
            a, b = sorted((i, j))
            text = text[:a] + text[b : b + 5] + text[a + 5 : b] + text[a : a + 5] + text[b + 5 :]
    return text


def _verdict(trace: Trace) -> list[tuple]:
    return sorted((f.code, f.message) for f in check_trace(trace, "all").findings)


def _located(exc: CommlintInputError, path: str) -> None:
    err = exc.error
    assert err.path == path, err
    assert "\n" not in err.message and err.message, err
    assert "Traceback" not in err.message


def _load_or_locate(text: str, is_json: bool) -> None:
    path = "fuzz.json" if is_json else "fuzz.yaml"
    try:
        trace = loads_trace(text, is_json=is_json, path=path)
    except CommlintInputError as exc:
        _located(exc, path)
        return
    assert _verdict(trace) == _verdict(trace)


@FUZZ
@given(mutated(PLAN_YAML))
def test_mutated_yaml_plans(text: str) -> None:
    _load_or_locate(text, is_json=False)


@FUZZ
@given(mutated(PLAN_JSON))
def test_mutated_json_plans(text: str) -> None:
    _load_or_locate(text, is_json=True)


@FUZZ
@given(st.data())
def test_mutated_nnscaler_gencode(tmp_path_factory, data: st.DataObject) -> None:
    folder = nnscaler_gen.tp_dp(tmp_path_factory.mktemp("nn"))
    victim = folder / f"gencode{data.draw(st.integers(0, 3))}.py"
    victim.write_text(data.draw(mutated(victim.read_text())))
    try:  # the one file alone: parsing the other three each time adds nothing
        trace = load_any(str(victim), "nnscaler").trace
    except CommlintInputError as exc:
        assert exc.error.path and str(folder) in exc.error.path, exc.error
        assert "\n" not in exc.error.message
        return
    assert _verdict(trace) == _verdict(trace)


@FUZZ
@given(st.data())
def test_mutated_sketchdlc(tmp_path_factory, data: st.DataObject) -> None:
    folder = sketchdlc_gen.write_job(tmp_path_factory.mktemp("sk"), keys=2, iterations=1)
    files = sorted(folder.iterdir())
    victim = files[data.draw(st.integers(0, len(files) - 1))]
    victim.write_text(data.draw(mutated(victim.read_text())))
    try:
        trace = load_any(str(folder), "sketchdlc").trace
    except CommlintInputError as exc:
        assert exc.error.path and str(folder) in exc.error.path, exc.error
        assert "\n" not in exc.error.message
        return
    assert _verdict(trace) == _verdict(trace)


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(mutated(PLAN_YAML), min_size=12, max_size=12),
    st.lists(mutated(PLAN_JSON), min_size=12, max_size=12),
)
def test_cli_on_a_batch_of_mutated_files(
    tmp_path_factory, yamls: list[str], jsons: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("batch")
    for i, text in enumerate(yamls):
        (folder / f"m{i:02}.yaml").write_text(text)
    for i, text in enumerate(jsons):
        (folder / f"m{i:02}.json").write_text(text)
    outs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "commlint", "plan", str(folder), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode in (0, 1, 2), proc.stderr  # a signal is negative
        assert "Traceback" not in proc.stderr
        assert "internal error" not in proc.stderr
        for line in proc.stderr.splitlines():
            assert line.startswith(f"commlint: error: {folder}"), line
        report = json.loads(proc.stdout)
        # every file is either checked or named by one error
        assert report["summary"]["checked"] + len(report["errors"]) == 24, report["errors"]
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
