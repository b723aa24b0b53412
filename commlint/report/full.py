"""`--format full`: ruff-style blocks with the source around each finding.

```
train.py:41:9: CL101 [error] all_reduce runs only on rank 0 ...
   |
39 |     if dist.get_rank() == 0:
   |        --------------------- this condition depends on the rank
40 |         loss = compute()
41 |         dist.all_reduce(loss)
   |         ^^^^^^^^^^^^^^^^^^^^^ CL101 conditional-collective
   |
   = help: move the all_reduce out of the branch ...
```

The call is marked `^`, related locations (the rank-dependent condition, the other actions
of a deadlock) `-` with their message; related locations in another file get their own
excerpt. Trace findings also get the wait-for cycle drawn. Without readable source the
block degrades to notes, never to an error.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import IO, Any

from commlint.findings import Finding, Report
from commlint.report.common import printable, secondary_locations, source_lines
from commlint.report.text import draw_cycle, summary_line

CONTEXT = 1  # lines shown before and after each marked line
MAX_SPAN_LINES = 5  # lines of a multi-line call shown before eliding the rest
TAB = "    "


@dataclass(frozen=True)
class Mark:
    line: int
    col: int | None
    end_line: int | None
    end_col: int | None
    label: str
    primary: bool


def _char_width(ch: str) -> int:
    if ch == "\t":
        return len(TAB)
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _width(text: str) -> int:
    return sum(_char_width(ch) for ch in text)


def _underline(text: str, mark: Mark) -> tuple[int, int]:
    """Display offset and width of the marker under `text` (the mark's first line)."""
    indent = len(text) - len(text.lstrip())
    if mark.col is None or mark.col < 1:
        start = indent
    else:
        # A column inside the indentation carries no meaning (trace findings say column 1).
        start = min(max(mark.col - 1, indent), len(text))
    if mark.end_line == mark.line and mark.end_col is not None and mark.end_col > start + 1:
        end = min(mark.end_col - 1, len(text))
    else:
        end = len(text.rstrip())
    return _width(text[:start]), max(1, _width(text[start:end]))


def _shown_lines(marks: list[Mark], n_lines: int) -> list[int]:
    shown: set[int] = set()
    for mark in marks:
        last = mark.line
        if mark.end_line is not None and mark.end_line > mark.line:
            last = min(mark.end_line, mark.line + MAX_SPAN_LINES - 1)
        shown.update(range(max(1, mark.line - CONTEXT), min(n_lines, last + CONTEXT) + 1))
    return sorted(shown)


def excerpt(lines: tuple[str, ...], marks: list[Mark], indent: str = "") -> list[str]:
    """The numbered source lines around `marks`, each mark underlined with its label."""
    marks = [m for m in marks if 1 <= m.line <= len(lines)]
    if not marks:
        return []
    shown = _shown_lines(marks, len(lines))
    gutter = len(str(shown[-1]))
    blank = f"{indent}{' ' * gutter} |"
    out = [blank]
    previous = None
    for number in shown:
        if previous is not None and number > previous + 1:
            out.append(f"{indent}...")
        previous = number
        text = lines[number - 1]
        out.append(f"{indent}{number:>{gutter}} | {text.replace(chr(9), TAB)}".rstrip())
        here = sorted(
            (m for m in marks if m.line == number), key=lambda m: (not m.primary, m.col or 0)
        )
        for mark in here:
            offset, width = _underline(text, mark)
            marker = ("^" if mark.primary else "-") * width
            out.append(f"{blank} {' ' * offset}{marker} {mark.label}".rstrip())
    out.append(blank)
    return out


def block(finding: Finding) -> list[str]:
    title = " ".join(finding.message.split())
    out = [f"{finding.where()}: {finding.code} [{finding.severity}] {title}"]
    by_file: dict[str, list[Mark]] = {}
    if finding.path and finding.line is not None:
        label = f"{finding.code} {finding.name}".rstrip()
        by_file[finding.path] = [
            Mark(finding.line, finding.col, finding.end_line, finding.end_col, label, True)
        ]
    notes: list[str] = []
    for loc, label in secondary_locations(finding):
        if not loc.path or loc.line is None:
            if loc.site or loc.path:
                notes.append(f"note: {loc.site or loc.path}: {label}")
            continue
        by_file.setdefault(loc.path, []).append(
            Mark(loc.line, loc.col, loc.end_line, loc.end_col, label, False)
        )
    for path, marks in by_file.items():
        lines = source_lines(path)
        shown = excerpt(lines, marks) if lines is not None else []
        if path != finding.path and shown:
            first = marks[0]
            out.append(f"  ::: {path}:{first.line}" + (f":{first.col}" if first.col else ""))
        if shown:
            out.extend(shown)
            continue
        for mark in marks:
            if not mark.primary:
                col = f":{mark.col}" if mark.col else ""
                notes.append(f"note: {path}:{mark.line}{col}: {mark.label}")
    if finding.cycle:
        notes.append(f"cycle: {draw_cycle(finding.cycle)}")
    elif finding.ranks:
        notes.append(f"ranks: {', '.join(map(str, finding.ranks))}")
    if finding.models:
        notes.append(f"model: {', '.join(finding.models)}")
    if finding.fix:
        notes.append(f"help: {' '.join(finding.fix.split())}")
    out.extend(f"  = {note}" for note in notes)
    return out


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    for finding in report.findings:
        stream.write("\n".join(map(printable, block(finding))) + "\n\n")
    stream.write(summary_line(report) + "\n")
