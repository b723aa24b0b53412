"""Frameworks' own entry points under the dry-run, on tiny configs (issue 11): each clean
program clean under fake tensors (no real compute), each with an injected rank-0-only
collective caught at the user's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def dry_run(script: Path, *args: str, save: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "commlint", "run", "--nproc-per-node", "2", "--timeout", "120"]
    if save is not None:
        cmd += ["--save-trace", str(save)]
    return subprocess.run(
        [*cmd, str(script), *args], capture_output=True, text=True, timeout=600, cwd=script.parent
    )


def test_lightning_trainer_ddp_is_clean_on_fake_tensors(tmp_path):
    pytest.importorskip("lightning")
    proc = dry_run(FIXTURES / "lightning_ddp.py", save=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "All checks passed" in proc.stdout
    assert "recorded again with small real CPU tensors" not in out  # no real compute
    saved = (tmp_path / "rank-00000.yaml").read_text()
    assert '"tensors": "fake"' in saved
    assert "DDP gradient bucket" in saved  # the Trainer's DDP backward was recorded


def test_lightning_rank0_only_collective_is_caught_at_the_users_line():
    pytest.importorskip("lightning")
    script = FIXTURES / "lightning_ddp.py"
    proc = dry_run(script, "rank0")
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    line = next(
        i for i, text in enumerate(script.read_text().splitlines(), 1) if "# rank 0 only" in text
    )
    assert f"lightning_ddp.py:{line}: CL20" in proc.stdout, proc.stdout
