"""CI runs the README's test command verbatim: a change to one that misses the other fails."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
    commands = [ln for b in blocks for ln in b.splitlines() if "python -m pytest" in ln]
    assert commands, "README.md has no test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[0] in ci.splitlines(), f"`.ci/run` does not run {commands[0]!r}"
    # the second command (CPU wheel index) runs the same pytest line
    assert {c[c.index("python -m pytest") :] for c in commands} == {
        commands[0][commands[0].index("python -m pytest") :]
    }
    assert " -n " in commands[0] and "--dist loadgroup" in commands[0]
