"""`pip install commlint[torch]` installs what the dry-run needs (issue 32): without numpy,
every dry-run rank of a correct program that uses object collectives failed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
OBJECT_PROGRAM = ROOT / "tests" / "dryrun" / "programs" / "ok_object_plan.py"


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["optional-dependencies"]


def _names(requirements: list[str]) -> list[str]:
    return [re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements]


def test_the_torch_extra_brings_numpy_and_one_torch() -> None:
    names = _names(_extras()["torch"])
    assert "numpy" in names
    assert names.count("torch") == 1  # no second torch pulled in (a CUDA build over the CPU one)


def test_the_test_extra_has_the_fuzzer() -> None:
    assert "hypothesis" in _names(_extras()["test"])


@pytest.mark.skipif(
    os.environ.get("COMMLINT_VENV_TESTS") != "1",
    reason="installs torch into a fresh venv (minutes, network): COMMLINT_VENV_TESTS=1",
)
def test_a_fresh_venv_with_the_torch_extra_dry_runs_object_collectives(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{ROOT}[torch]"], check=True, timeout=3600
    )
    run = subprocess.run(
        [str(python), "-m", "commlint", "run", "--nproc-per-node", "2", str(OBJECT_PROGRAM)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
