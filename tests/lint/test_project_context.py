"""Files given one by one (pre-commit passes only the changed ones) are checked with the rest
of their project: a rank-0-only call of an unchanged helper that all-reduces is a hang, and a
changed helper that now all-reduces makes its unchanged rank-0-only caller one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = """\
import torch.distributed as dist


def sync_metrics(t):
    dist.all_reduce(t)
    return t
"""

QUIET_HELPER = """\
import torch.distributed as dist


def sync_metrics(t):
    return t
"""

CALLER = """\
import torch.distributed as dist

from pkg.helpers import sync_metrics


def train(t):
    if dist.get_rank() == 0:
        sync_metrics(t)
"""

OTHER = """\
import torch.distributed as dist


def save():
    if dist.get_rank() == 0:
        dist.barrier()
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "helpers.py").write_text(HELPER, encoding="utf-8")
    (pkg / "train.py").write_text(CALLER, encoding="utf-8")
    (pkg / "other.py").write_text(OTHER, encoding="utf-8")
    return tmp_path


def check(cwd: Path, *args: str) -> tuple[int, list[tuple[str, int, str]], str]:
    out = subprocess.run(
        [sys.executable, "-m", "commlint", "check", "--format", "json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(out.stdout)
    found = sorted((f["path"], f["line"], f["code"]) for f in data["findings"])
    return out.returncode, found, out.stderr


def test_a_changed_caller_of_an_unchanged_helper(project):
    code, found, _ = check(project, "pkg/train.py")
    assert code == 1
    assert found == [("pkg/train.py", 8, "CL101")]


def test_a_changed_helper_reports_its_unchanged_caller(project):
    code, found, _ = check(project, "pkg/helpers.py")
    assert code == 1
    assert found == [("pkg/train.py", 8, "CL101")]  # caused through helpers.py:5


def test_unrelated_findings_in_unchanged_files_are_not_reported(project):
    (project / "pkg" / "helpers.py").write_text(QUIET_HELPER, encoding="utf-8")
    code, found, _ = check(project, "pkg/helpers.py")
    assert (code, found) == (0, [])  # other.py's CL101 is not this change's business


def test_no_context_checks_the_file_alone(project):
    code, found, _ = check(project, "--no-context", "pkg/train.py")
    assert (code, found) == (0, [])


def test_a_folder_is_checked_as_before(project):
    code, found, _ = check(project, "pkg")
    assert code == 1
    assert found == [("pkg/other.py", 6, "CL101"), ("pkg/train.py", 8, "CL101")]


def test_noqa_in_an_unchanged_file(project):
    """A context file's `# noqa` suppresses what is located there (the finding caused through
    the changed helper), and is not itself judged: an unused one in it is not reported."""
    caller = CALLER.replace("sync_metrics(t)", "sync_metrics(t)  # noqa: CL101")
    (project / "pkg" / "train.py").write_text(caller, encoding="utf-8")
    other = OTHER.replace("def save():", "def save():  # noqa: CL102")
    (project / "pkg" / "other.py").write_text(other, encoding="utf-8")
    code, found, _ = check(project, "pkg/helpers.py")
    assert (code, found) == (0, [])
    code, found, _ = check(project, "pkg/other.py")  # given: its unused noqa is judged
    assert ("pkg/other.py", 4, "CL113") in found


def test_noqa_inside_a_string_is_not_a_comment(project):
    src = OTHER + '\nSNIPPET = "dist.barrier()  # noqa: CL101"\n'
    (project / "pkg" / "other.py").write_text(src, encoding="utf-8")
    code, found, _ = check(project, "pkg/other.py")
    assert code == 1
    assert found == [("pkg/other.py", 6, "CL101")]  # no CL113 for the string's text


def test_a_folder_run_warms_the_cache_for_pre_commit(project):
    """`check pkg` names files `pkg/a.py`, a pre-commit run names its context files by
    absolute path: the same file is one cache entry, so the first pre-commit run after a
    folder run analyses nothing again, and its findings keep this run's names."""
    check(project, "pkg")
    entries = sorted(p.name for p in (project / ".commlint_cache").rglob("*.pkl"))
    assert len(entries) == 4  # __init__, helpers, train, other
    code, found, _ = check(project, "pkg/helpers.py")
    assert (code, found) == (1, [("pkg/train.py", 8, "CL101")])
    assert sorted(p.name for p in (project / ".commlint_cache").rglob("*.pkl")) == entries


def test_what_git_ignores_is_not_context(project):
    """A build or download folder that .gitignore names (`vendor/`, holding a copy of a
    caller) is not part of the project a pre-commit run checks against, as ruff leaves it out."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".gitignore").write_text("vendor/\n", encoding="utf-8")
    vendor = project / "vendor" / "pkg"
    vendor.mkdir(parents=True)
    (vendor / "copy.py").write_text(CALLER, encoding="utf-8")
    code, found, _ = check(project, "pkg/helpers.py")
    assert (code, found) == (1, [("pkg/train.py", 8, "CL101")])
    (project / ".gitignore").write_text("", encoding="utf-8")  # not ignored: it is a caller
    code, found, _ = check(project, "pkg/helpers.py")
    assert ("vendor/pkg/copy.py", 8, "CL101") in found
