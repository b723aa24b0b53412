"""The plan file format: its docs cover every field, and bad input fails with a located,
one-line error (exit 2) while the other files are still checked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commlint.findings import CommlintInputError
from commlint.plans.io import dump_trace, load_trace, loads_trace
from commlint.trace import Action, RankEnd, Trace

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("model", [Trace, Action, RankEnd])
def test_every_field_is_documented(model):
    for name, field in model.model_fields.items():
        key = field.alias or name
        assert re.search(rf"\| `{key}`", DOC) or f"`{key}`" in DOC, f"{model.__name__}.{key}"
        assert field.description, f"{model.__name__}.{key} has no field doc"


GOOD = """version: 1
world_size: 2
ranks:
  0:
    - {op: send, peer: 1}
  1:
    - {op: recv, peer: 0}
"""

BAD_CASES = {
    "unknown field": (
        "    - {op: send, peer: 1, sitex: x}",
        5,
        "rank 0, action 0: unknown field 'sitex'",
    ),
    "unknown op": ("    - {op: sendd, peer: 1}", 5, "rank 0, action 0: unknown op 'sendd'"),
    "peer range": ("    - {op: send, peer: 5}", 5, "rank 0, action 0: peer 5 is outside 0..1"),
    "undefined group": ("    - {op: send, peer: 1, group: tp}", 5, "undefined group 'tp'"),
    "undefined handle": ("    - {op: wait, handles: [h]}", 5, "wait on undefined handle 'h'"),
    "root on all_reduce": ("    - {op: all_reduce, root: 0}", 5, "'root' is only for"),
    "self send": ("    - {op: send, peer: 0}", 5, "send to itself"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_located_errors(case, tmp_path):
    line, lineno, expected = BAD_CASES[case]
    text = GOOD.replace("    - {op: send, peer: 1}", line)
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(CommlintInputError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{lineno}: "), message
    assert expected in message
    assert "\n" not in message


def test_syntax_and_encoding_errors(tmp_path):
    bad_yaml = tmp_path / "a.yaml"
    bad_yaml.write_text("version: 1\nranks: [\n")
    with pytest.raises(CommlintInputError, match="invalid YAML"):
        load_trace(bad_yaml)
    bad_json = tmp_path / "b.json"
    bad_json.write_text('{"version": 1,')
    with pytest.raises(CommlintInputError, match=r"b\.json:1: invalid JSON"):
        load_trace(bad_json)
    latin = tmp_path / "c.yaml"
    latin.write_bytes("version: 1 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(CommlintInputError, match="not UTF-8"):
        load_trace(latin)


def test_cli_bad_file_exits_2_and_checks_the_rest(tmp_path):
    (tmp_path / "bad.yaml").write_text(GOOD.replace("peer: 1}", "peer: 1, sitex: x}"))
    (tmp_path / "deadlock.yaml").write_text(
        GOOD.replace(
            "    - {op: recv, peer: 0}", "    - {op: send, peer: 0}\n    - {op: recv, peer: 0}"
        ).replace(
            "    - {op: send, peer: 1}\n  1",
            "    - {op: send, peer: 1}\n    - {op: recv, peer: 1}\n  1",
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "commlint", "plan", str(tmp_path), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert err == [
        f"commlint: error: {tmp_path / 'bad.yaml'}:5: rank 0, action 0: unknown field 'sitex'"
    ]
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert [f["code"] for f in report["findings"]] == ["CL201"]
    assert report["summary"]["input_errors"] == 1 and report["summary"]["checked"] == 1


def test_exit_codes(tmp_path):
    ok = tmp_path / "ok.yaml"
    ok.write_text(GOOD)

    def run(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "commlint", *args]
        return subprocess.run(cmd, capture_output=True, text=True)

    assert run("plan", str(ok)).returncode == 0
    assert run("plan", str(ROOT / "examples" / "send_send_deadlock.yaml")).returncode == 1
    assert (
        run("plan", str(ROOT / "examples" / "send_send_deadlock.yaml"), "--exit-zero").returncode
        == 0
    )
    missing = run("plan", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert run("plan", str(ok), "--model", "bogus").returncode == 2
    assert run("rule", "CL999").returncode == 2
    assert "deadlock-cycle" in run("rule", "cl201").stdout


def test_dump_round_trip():
    trace = loads_trace((ROOT / "tests" / "corpus" / "fifo_order_swapped.yaml").read_text())
    again = loads_trace(dump_trace(trace))
    assert again.model_dump() == trace.model_dump()
