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


def recall_cases(prefix: str) -> list[str]:
    """The recall programs whose folder names start with `prefix`."""
    return sorted(p.name for p in RECALL.glob(f"{prefix}*") if p.is_dir())


def assert_marked_findings(case: str, tmp_path: Path) -> None:
    """The program's findings are exactly its `# expect:` marks, with no input error."""
    files = recall_files(case)
    report = lint_files(files, tmp_path)
    found = sorted((Path(f.path).name, f.line, f.code) for f in report.findings)
    assert found == marked(files), [f.message for f in report.findings]
    assert not report.errors, report.errors


def assert_twins_and_labels(cases: list[str], least_bugs: int) -> None:
    """Every bug program has marks and an unmarked `_ok` twin, and every program's main.py
    names the label its real run gave (`# label: ok|hang|fail ...`)."""
    bugs = [c for c in cases if not c.endswith("_ok")]
    assert len(bugs) >= least_bugs
    for case in bugs:
        assert marked(recall_files(case)), f"{case}: a bug program with nothing marked"
        twin = f"{case}_ok"
        assert twin in cases, f"{case} has no correct twin"
        assert not marked(recall_files(twin)), twin
    for case in cases:
        head = (RECALL / case / "main.py").read_text(encoding="utf-8").splitlines()[:4]
        assert any(re.match(r"# label: (ok|hang|fail) ", line) for line in head), case
