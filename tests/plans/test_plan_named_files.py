"""A plan names plan data only (issue 32): `generate.schedule.csv` resolves in the plan's
folder (or a folder given with `--allow-path`), must be a regular file of bounded size, and
its text never reaches a message — only the row and column that failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import commlint.plans.generate_pipeline as generate_pipeline
from commlint.findings import CommlintInputError
from commlint.plans.io import load_trace

ZBH1 = "".join(
    ",".join(row) + "\n"
    for row in [
        ["0F0", "0F1", "0I0", "0F2", "0I1", "0W0", "0I2", "0W1", "0W2"],
        ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1", "1F2", "1I2", "1W2"],
    ]
)


def _plan(folder: Path, csv: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "plan.yaml"
    plan.write_text(f"version: 1\ngenerate:\n  degrees: {{pp: 2}}\n  schedule: {{csv: '{csv}'}}\n")
    return plan


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commlint", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.PIPE,  # held open: a read of /dev/stdin would block until the timeout
    )


@pytest.mark.parametrize("target", ["/etc/passwd", "/proc/self/environ", "/dev/stdin", "/dev/zero"])
def test_a_plan_cannot_name_a_file_outside_its_folder(tmp_path: Path, target: str) -> None:
    plan = _plan(tmp_path / "plans", target)
    proc = _cli(str(plan))
    assert proc.returncode == 2
    assert f"{plan}:4:" in proc.stderr and "outside the plan's folder: not read" in proc.stderr
    assert "root:" not in proc.stderr and "PATH=" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_link_or_dot_dot_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("TOKEN=hunter2\n")
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "link.csv").symlink_to(secret)
    for named in ("link.csv", "../secret.csv"):
        with pytest.raises(CommlintInputError, match="outside the plan's folder") as info:
            load_trace(_plan(tmp_path / "plans", named))
        assert "hunter2" not in str(info.value)


def test_a_fifo_in_the_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "plans", "pipe.csv")
    os.mkfifo(tmp_path / "plans" / "pipe.csv")
    proc = _cli(str(plan))
    assert proc.returncode == 2
    assert "schedule.csv: not a regular file (a FIFO): not read" in proc.stderr


def test_the_text_of_a_named_file_is_never_shown(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "plans", "s.csv")
    (tmp_path / "plans" / "s.csv").write_text("0F0,SECRET_VALUE_42\n1F0,1B0\n")
    with pytest.raises(CommlintInputError) as info:
        load_trace(plan)
    message = str(info.value)
    assert "row 1, column 2: cannot read action (expected" in message
    assert "SECRET_VALUE_42" not in message
    (tmp_path / "plans" / "s.csv").write_bytes(b"0F0,\xff\xfeSECRET\n")
    with pytest.raises(CommlintInputError) as info:
        load_trace(plan)
    assert "not UTF-8 (byte 4)" in str(info.value) and "xff" not in str(info.value)


def test_a_named_file_is_size_limited(tmp_path: Path, monkeypatch) -> None:
    plan = _plan(tmp_path / "plans", "s.csv")
    (tmp_path / "plans" / "s.csv").write_text(ZBH1)
    monkeypatch.setattr(generate_pipeline, "MAX_NAMED_BYTES", 64)
    with pytest.raises(CommlintInputError, match="larger than the 64-byte limit"):
        load_trace(plan)


def test_allow_path_admits_another_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "zbh1.csv").write_text(ZBH1)
    plan = _plan(tmp_path / "plans", str(shared / "zbh1.csv"))
    refused = _cli(str(plan))
    assert refused.returncode == 2 and "--allow-path" in refused.stderr
    allowed = _cli(str(plan), "--allow-path", str(shared), "--model", "all")
    assert allowed.returncode == 0, allowed.stderr
    trace = load_trace(plan, allow_paths=[str(shared)]).trace
    assert trace.meta["schedule"] == "csv"
