"""Under `-n N --dist loadgroup` (the README's command), tests sharing a module-scoped fixture
of their own module run on one worker, so an expensive real-run batch runs once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

SAMPLE = """\
import os

import pytest


@pytest.fixture(scope="module")
def batch():
    return os.getpid()


@pytest.mark.parametrize("k", range(4))
def test_shares_the_batch(batch, k):
    print("BATCH", os.environ["PYTEST_XDIST_WORKER"], batch)


@pytest.mark.parametrize("k", range(4))
def test_alone(k):
    pass
"""


def test_tests_sharing_a_module_fixture_run_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-rP",
         "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    grouped = [ln for ln in proc.stdout.splitlines() if "PASSED" in ln and "shares" in ln]
    assert len(grouped) == 4 and all("@test_sample::batch" in ln for ln in grouped), grouped
    alone = [ln for ln in proc.stdout.splitlines() if "PASSED" in ln and "test_alone" in ln]
    assert len(alone) == 4 and not any("@" in ln.split("test_alone")[1] for ln in alone), alone
    # one worker, one fixture value: the batch ran once
    batches = {ln.split("BATCH", 1)[1].strip() for ln in proc.stdout.splitlines() if "BATCH" in ln}
    assert len(batches) == 1, batches
