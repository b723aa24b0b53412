"""Output is data, never markup (issue 32): a newline, NUL, other controls or a bidi override
in a file or group name is written as an escape in every format — it never starts a line of
its own (`::error file=…` in a CI log), never reaches the terminal raw, and the JSON formats
still give back the exact name when parsed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from report_samples import make_report, render

from commlint.findings import CycleEdge, Finding, InputError
from commlint.report import FORMATS

EVIL_PATH = "plan\n::error file=ci.py,line=1::forged\x00\u202etxt.yaml"
EVIL_GROUP = "tp\r\n::warning::x\u2066g\x1b[31m"
RAW = ("\x00", "\x1b", "\u202e", "\u2066", "\r")


def _report():
    finding = Finding(
        code="CL201",
        name="deadlock-cycle",
        severity="error",
        message=f"rank 0 waits in all_reduce({EVIL_GROUP}) for rank 1.",
        path=EVIL_PATH,
        line=3,
        ranks=[0, 1],
        cycle=[
            CycleEdge(
                rank=0, action=0, op=f"all_reduce({EVIL_GROUP})", site=EVIL_PATH, waits_for=1
            ),
            CycleEdge(rank=1, action=0, op="barrier", waits_for=0),
        ],
        fix="Call it on every rank.",
    )
    return make_report(finding, errors=[InputError(path=EVIL_PATH, line=2, message="bad")])


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_lets_a_name_act_as_markup(fmt: str) -> None:
    out = render(_report(), fmt)
    for raw in RAW:
        assert raw not in out, (fmt, raw)
    lines = out.splitlines()
    forged = [line for line in lines if "forged" in line or "::warning::x" in line]
    assert forged, fmt  # the names are shown…
    # …but never at the start of a line, where a CI log would read them as a command
    assert not [
        line for line in lines if line.lstrip().startswith(("::error file=ci.py", "::warn"))
    ]
    if fmt in ("json", "sarif", "rdjson"):
        assert EVIL_PATH in _strings(json.loads(out))  # the data round-trips


def _strings(value) -> set[str]:
    if isinstance(value, dict):
        return set().union(*map(_strings, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_strings, value)) if value else set()
    return {value} if isinstance(value, str) else set()


@pytest.mark.parametrize("fmt", ["text", "concise", "full"])
def test_text_formats_show_the_escapes(fmt: str) -> None:
    out = render(_report(), fmt)
    assert "plan\\n::error file=ci.py,line=1::forged\\x00\\u202etxt.yaml" in out
    group = "tp\\r\\n::warning::x" if fmt != "concise" else "tp ::warning::x"  # (one line)
    assert group + "\\u2066g\\x1b[31m" in out


def test_an_input_error_on_stderr_cannot_forge_a_line(tmp_path: Path) -> None:
    plan = tmp_path / "a\n::error file=ci.py,line=1::forged\u202e.yaml"
    plan.write_text("version: 1\nworld_size: [\n")
    proc = subprocess.run(
        [sys.executable, "-m", "commlint", "plan", str(plan)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "::error file=ci.py" not in "\n".join(
        line for line in proc.stderr.splitlines() if not line.startswith("commlint: error:")
    )
    assert "a\\n::error file=ci.py,line=1::forged\\u202e.yaml:" in proc.stderr
    assert "\u202e" not in proc.stderr
