"""The real `pre-commit try-repo` against a sample repository: the hook fails on a file with a
rank-conditional collective and passes on a correct one.

pre-commit builds a fresh virtualenv and `pip install`s a clone of the project's HEAD into it;
a pip constraint that no torch can satisfy proves that the install never pulls torch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

BAD = """\
import torch.distributed as dist


def save(model, step):
    if dist.get_rank() == 0:
        dist.barrier()
        print("saved", step)
"""

GOOD = """\
import torch.distributed as dist


def save(model, step):
    dist.barrier()
    if dist.get_rank() == 0:
        print("saved", step)
"""

pytestmark = pytest.mark.skipif(shutil.which("pre-commit") is None, reason="needs pre-commit")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_hook_definition_is_what_users_expect():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "commlint"
    assert hook["entry"].split()[:2] == ["commlint", "check"]
    assert hook["language"] == "python"
    assert hook["types"] == ["python"]
    assert hook["require_serial"] is True


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the project's HEAD: what pre-commit installs (uncommitted work is ignored)."""
    clone = tmp_path_factory.mktemp("hook") / "commlint"
    subprocess.run(
        ["git", "clone", "--quiet", "--depth", "1", f"file://{ROOT}", str(clone)],
        check=True,
        capture_output=True,
    )
    if not (clone / ".pre-commit-hooks.yaml").exists():
        pytest.fail(".pre-commit-hooks.yaml is not committed at HEAD")
    return clone


@pytest.fixture(scope="module")
def sample_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("sample")
    (repo / "bad.py").write_text(BAD, encoding="utf-8")
    (repo / "good.py").write_text(GOOD, encoding="utf-8")
    (repo / "notes.txt").write_text("dist.barrier() in text is not python\n", encoding="utf-8")
    git(repo, "init", "--quiet")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "sample")
    return repo


def try_repo(hook_repo: Path, sample_repo: Path, *files: str) -> subprocess.CompletedProcess:
    constraints = sample_repo.parent / "no-torch.txt"
    constraints.write_text("torch==0.0.0\n", encoding="utf-8")
    env = dict(os.environ, PIP_CONSTRAINT=str(constraints), NO_COLOR="1")
    env.pop("PRE_COMMIT_HOME", None)  # try-repo uses a fresh store anyway
    return subprocess.run(
        ["pre-commit", "try-repo", str(hook_repo), "commlint", "--color=never", "--files", *files],
        cwd=sample_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.real
def test_try_repo_fails_on_the_bad_file_and_passes_on_the_good_one(hook_repo, sample_repo):
    bad = try_repo(hook_repo, sample_repo, "bad.py", "notes.txt")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert re.search(r"^commlint\.+Failed$", out, re.M), out
    assert re.search(r"bad\.py:6:\d+: CL1\d\d", out), out  # the barrier under `if rank == 0`
    assert "notes.txt" not in out  # types: [python]

    good = try_repo(hook_repo, sample_repo, "good.py")
    out = good.stdout + good.stderr
    assert good.returncode == 0, out
    assert re.search(r"^commlint\.+Passed$", out, re.M), out
