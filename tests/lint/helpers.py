"""Run the linter on source text, without the cache."""

from __future__ import annotations

import re
from pathlib import Path

from commlint.findings import Report
from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, lint_paths


def lint_files(files: dict[str, str], root: Path, **opts) -> Report:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    config = opts.pop("config", None) or LintConfig(root=root)
    return lint_paths([str(root)], config, LintOptions(cache=False, select=["ALL"], **opts))


def lint_source(text: str, root: Path, **opts) -> Report:
    return lint_files({"example.py": text}, root, **opts)


RECALL = Path(__file__).parent / "recall"  # outsiders'-style programs, one folder each
_EXPECT = re.compile(r"#\s*expect:\s*((?:CL\d+\s*)+)")


def recall_files(name: str) -> dict[str, str]:
    """The files of the recall program `recall/<name>/`, by file name."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((RECALL / name).glob("*.py"))}


def marked(files: dict[str, str]) -> list[tuple[str, int, str]]:
    """(file, line, code) of every `# expect: CLnnn [CLmmm ...]` mark, sorted."""
    return sorted(
        (fname, k, code)
        for fname, text in files.items()
        for k, line in enumerate(text.splitlines(), 1)
        for m in [_EXPECT.search(line)]
        if m
        for code in m.group(1).split()
    )
