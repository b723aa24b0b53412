"""The corpus: realistic programs, each line that must be reported marked `# expect: CODE`.

Every top-level file is linted on its own; every `proj_*` folder is linted as one program
(calls between its modules are followed). The findings must be exactly the marked ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, lint_paths

CORPUS = Path(__file__).with_name("corpus")
EXPECT = re.compile(r"#\s*expect:\s*((?:CL\d+\s*)+)")


def _units() -> list[Path]:
    files = sorted(p for p in CORPUS.glob("*.py"))
    projects = sorted(p for p in CORPUS.glob("proj_*") if p.is_dir())
    return files + projects


def _expected(unit: Path) -> set[tuple[str, int, str]]:
    out = set()
    for f in [unit] if unit.is_file() else sorted(unit.glob("*.py")):
        for k, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            m = EXPECT.search(line)
            if m:
                for code in m.group(1).split():
                    out.add((f.name, k, code))
    return out


def test_corpus_is_big_and_balanced():
    units = _units()
    assert len(units) >= 40
    clean = [u for u in units if not _expected(u)]
    assert len(clean) >= len(units) * 0.4, "about half of the corpus is correct code"


@pytest.mark.parametrize("unit", _units(), ids=lambda p: p.name)
def test_corpus_program(unit: Path):
    report = lint_paths(
        [str(unit)], LintConfig(root=CORPUS), LintOptions(cache=False, select=["ALL"])
    )
    assert not report.errors
    got = {(Path(f.path).name, f.line, f.code) for f in report.findings}
    details = {(Path(f.path).name, f.line, f.code): f.message for f in report.findings}
    expected = _expected(unit)
    assert got == expected, "\n".join(
        [f"unexpected {g}: {details[g]}" for g in sorted(got - expected)]
        + [f"missing {e}" for e in sorted(expected - got)]
    )
