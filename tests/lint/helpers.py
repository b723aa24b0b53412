"""Run the linter on source text, without the cache."""

from __future__ import annotations

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
