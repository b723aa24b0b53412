"""The real `pre-commit try-repo` against a sample repository: the hook fails on a file with a
rank-conditional collective and passes on a correct one.

pre-commit builds a fresh virtualenv and `pip install`s a clone of the project's HEAD into it,
once per `try-repo`. Most of that time is pip crawling the package index for every dependency
(the resolver reads each project's whole release page), so the dependencies are downloaded
once into a wheelhouse kept in pytest's cache (keyed by the dependency list) and the installs
run with `PIP_NO_INDEX` from it. A pip constraint that no torch can satisfy proves that the
install never pulls torch.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
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


HELPER = """\
import torch.distributed as dist


def sync_metrics(t):
    dist.all_reduce(t)
    return t
"""

CALLER = """\
import torch.distributed as dist

from helpers import sync_metrics


def log(t):
    if dist.get_rank() == 0:
        sync_metrics(t)
"""


@pytest.fixture(scope="module")
def sample_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("sample")
    (repo / "bad.py").write_text(BAD, encoding="utf-8")
    (repo / "good.py").write_text(GOOD, encoding="utf-8")
    (repo / "helpers.py").write_text(HELPER, encoding="utf-8")
    (repo / "caller.py").write_text(CALLER, encoding="utf-8")
    (repo / "notes.txt").write_text("dist.barrier() in text is not python\n", encoding="utf-8")
    git(repo, "init", "--quiet")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "sample")
    return repo


def install_requirements(project: Path) -> list[str]:
    """What `pip install project` needs: its build requirements and its dependencies."""
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(meta["build-system"]["requires"] + meta["project"]["dependencies"])


@pytest.fixture(scope="module")
def wheelhouse(pytestconfig: pytest.Config, hook_repo: Path) -> Path:
    requirements = install_requirements(hook_repo)
    assert not any(r.lower().startswith("torch") for r in requirements)
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    folder = pytestconfig.cache.mkdir(f"commlint-wheelhouse-{key}")
    if not (folder / ".complete").exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "-d", str(folder), *requirements],
            check=True,
            capture_output=True,
            timeout=120,
        )
        (folder / ".complete").write_text("\n".join(requirements), encoding="utf-8")
    return folder


def try_repo(
    hook_repo: Path, sample_repo: Path, wheelhouse: Path, *files: str
) -> subprocess.CompletedProcess:
    constraints = sample_repo.parent / "no-torch.txt"
    constraints.write_text("torch==0.0.0\n", encoding="utf-8")
    env = dict(
        os.environ,
        PIP_CONSTRAINT=str(constraints),
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(wheelhouse),
        NO_COLOR="1",
    )
    env.pop("PRE_COMMIT_HOME", None)  # try-repo uses a fresh store anyway
    return subprocess.run(
        ["pre-commit", "try-repo", str(hook_repo), "commlint", "--color=never", "--files", *files],
        cwd=sample_repo,
        env=env,
        capture_output=True,
        text=True,
        # it builds a virtualenv and installs commlint into it: 90 s ran out at load 7-14 with
        # four test workers; the limit only waits, a passing run is as fast as before
        timeout=300,
    )


@pytest.mark.real
def test_try_repo_fails_on_the_bad_file_and_passes_on_the_good_one(
    hook_repo, sample_repo, wheelhouse
):
    bad = try_repo(hook_repo, sample_repo, wheelhouse, "bad.py", "notes.txt")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert re.search(r"^commlint\.+Failed$", out, re.M), out
    assert re.search(r"bad\.py:6:\d+: CL1\d\d", out), out  # the barrier under `if rank == 0`
    assert "notes.txt" not in out  # types: [python]

    good = try_repo(hook_repo, sample_repo, wheelhouse, "good.py")
    out = good.stdout + good.stderr
    assert good.returncode == 0, out
    assert re.search(r"^commlint\.+Passed$", out, re.M), out


@pytest.mark.real
def test_a_changed_file_calling_an_unchanged_helper_fails(hook_repo, sample_repo, wheelhouse):
    # pre-commit passes only caller.py; the all_reduce is in the unchanged helpers.py
    run = try_repo(hook_repo, sample_repo, wheelhouse, "caller.py")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert re.search(r"caller\.py:8:\d+: CL101", out), out
    assert "bad.py" not in out  # unchanged files' own findings are not this commit's
