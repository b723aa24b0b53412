"""The command examples in README.md and docs/*.md print what the tool prints.

A fenced block tagged `console tested` is run (the convention is described in
docs/output-formats.md, "Examples in these docs are tested"):

    ```console tested
    $ commlint plan examples/send_send_deadlock.yaml   # exit 1
    examples/send_send_deadlock.yaml:6:1: CL201 [error] deadlock-cycle
      fix: Every rank in the cycle sends before it receives, ...
    ```

- `$ ` starts a command (a trailing `\\` continues it on the next line); it runs in bash from
  a scratch folder that sees the repository's `examples/`, `docs/` and `tests/`, with
  `commlint` meaning this interpreter's `python -m commlint`;
- `# exit N` at the end of a command is the exit code it must return (0 when absent);
- the lines up to the next `$ ` are its expected output, stdout and stderr together;
- `...` inside a line matches any text; a line that is only `...` matches any lines;
- the scratch folder's path prints as `.`, trailing blanks are ignored.

The README's `repo: local` pre-commit snippet is run for real by pre-commit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```console tested\s*$")
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


@dataclass
class Example:
    doc: str
    line: int
    command: str
    exit_code: int
    expected: list[str]

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def examples_in(path: Path) -> list[Example]:
    out: list[Example] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        i += 1
        current: Example | None = None
        while i < len(lines) and not lines[i].startswith("```"):
            text = lines[i]
            if text.startswith("$ "):
                start = i + 1
                command = text[2:]
                while command.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    command = command[:-1] + " " + lines[i].strip()
                code = 0
                m = EXIT.search(command)
                if m:
                    code, command = int(m.group(1)), command[: m.start()]
                current = Example(str(path.relative_to(ROOT)), start, command, code, [])
                out.append(current)
            elif current is not None:
                current.expected.append(text)
            i += 1
        i += 1
    return out


ALL = [ex for doc in DOCS for ex in examples_in(doc)]


def matches(expected: list[str], actual: list[str]) -> bool:
    """Lines match with `...` as a wildcard within a line, and alone for any lines."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head.strip() == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(part) for part in head.rstrip().split("..."))
    return re.fullmatch(pattern, actual[0].rstrip()) is not None and matches(rest, actual[1:])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs")
    for name in ("examples", "docs", "tests"):
        (folder / name).symlink_to(ROOT / name)
    return folder


def environment(scratch: Path) -> dict[str, str]:
    bin_dir = scratch.parent / f"{scratch.name}-bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "commlint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m commlint "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = dict(os.environ, NO_COLOR="1", PYTHONUNBUFFERED="1", COLUMNS="100")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env.pop("COMMLINT_DOCS_URL", None)
    return env


def test_the_docs_have_tested_examples():
    docs = {ex.doc for ex in ALL}
    assert {"README.md", "docs/output-formats.md", "docs/replay.md"} <= docs
    assert len(ALL) >= 6


@pytest.mark.parametrize("example", ALL, ids=str)
def test_example_prints_what_the_docs_say(example: Example, scratch: Path):
    proc = subprocess.run(
        ["bash", "-c", example.command],
        cwd=scratch,
        env=environment(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    actual = [line.replace(str(scratch), ".").rstrip() for line in proc.stdout.splitlines()]
    expected = [line.rstrip() for line in example.expected]
    while expected and not expected[-1]:
        expected.pop()
    while actual and not actual[-1]:
        actual.pop()
    assert matches(expected, actual), f"{example}: `{example.command}` printed:\n" + "\n".join(
        actual
    )
    assert proc.returncode == example.exit_code, f"{example}: exit code {proc.returncode}"


def test_matching_rules():
    assert matches(["a ... c"], ["a b c"])
    assert not matches(["a ... c"], ["a b d"])
    assert matches(["x", "...", "z"], ["x", "1", "2", "z"])
    assert matches(["x", "...", "z"], ["x", "z"])
    assert not matches(["x", "z"], ["x", "y", "z"])
    assert not matches(["x"], ["x", "extra"])


BAD = """\
import torch.distributed as dist


def save(step):
    if dist.get_rank() == 0:
        dist.barrier()
"""


def local_hook_snippet() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        config = yaml.safe_load(block)
        if isinstance(config, dict) and config.get("repos", [{}])[0].get("repo") == "local":
            return config
    raise AssertionError("README.md has no `repo: local` pre-commit snippet")


@pytest.mark.skipif(shutil.which("pre-commit") is None, reason="needs pre-commit")
def test_readme_local_pre_commit_hook_runs(tmp_path: Path):
    config = local_hook_snippet()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (repo / "bad.py").write_text(BAD, encoding="utf-8")
    (repo / "good.py").write_text(BAD.replace("    if dist.get_rank() == 0:\n    ", ""))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    env = environment(tmp_path)
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")

    def hook(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["pre-commit", "run", "--color=never", "--files", *files],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = hook("bad.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert re.search(r"bad\.py:6:\d+: CL101", bad.stdout), bad.stdout
    good = hook("good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"^commlint\.+Passed$", good.stdout, re.M), good.stdout


@pytest.mark.skipif(shutil.which("pre-commit") is None, reason="needs pre-commit")
def test_hook_manifest_is_valid_for_pre_commit():
    proc = subprocess.run(
        ["pre-commit", "validate-manifest", str(ROOT / ".pre-commit-hooks.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the commented usage example names no tag that does not exist
    assert "v0.1.0" not in (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    for doc in DOCS:
        assert "rev: v0.1.0" not in doc.read_text(encoding="utf-8"), doc
