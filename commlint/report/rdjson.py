"""`--format rdjson`: the Reviewdog Diagnostic Format (`DiagnosticResult`), for PR review.

`reviewdog -f=rdjson` reads it; each diagnostic has the rule code with its docs URL, an
ERROR/WARNING severity, a location with a 1-based range, and the related locations (the
rank-dependent condition). commlint proposes no automatic suggestions.
"""

from __future__ import annotations

import json
from typing import IO, Any

from commlint.findings import Finding, Report
from commlint.report.common import (
    PROJECT_URL,
    Span,
    anchor,
    finding_anchor,
    json_text,
    posix_path,
    rule_url,
    secondary_locations,
)

SOURCE = {"name": "commlint", "url": PROJECT_URL}


def _range(line: int | None, col: int | None, end_line: int | None, end_col: int | None):
    if line is None:
        return None
    start: dict[str, int] = {"line": line}
    if col is not None:
        start["column"] = col
    rng: dict[str, Any] = {"start": start}
    if end_line is not None:
        end: dict[str, int] = {"line": end_line}
        if end_col is not None:
            end["column"] = end_col
        rng["end"] = end
    return rng


def location(span: Span | None) -> dict[str, Any] | None:
    if span is None:
        return None
    out: dict[str, Any] = {"path": posix_path(span.path)}
    rng = _range(span.line, span.col, span.end_line, span.end_col)
    if rng:
        out["range"] = rng
    return out


def diagnostic(finding: Finding) -> dict[str, Any]:
    message = finding.message
    if finding.fix:
        message += f"\nFix: {finding.fix}"
    diag: dict[str, Any] = {
        "message": message,
        "severity": "ERROR" if finding.severity == "error" else "WARNING",
        "source": SOURCE,
        "code": {"value": finding.code, "url": rule_url(finding.code)},
    }
    loc = location(finding_anchor(finding))
    if loc:
        diag["location"] = loc
    related = []
    for rel, label in secondary_locations(finding):
        rel_loc = location(anchor(rel))
        if rel_loc:
            related.append({"message": label, "location": rel_loc})
    if related:
        diag["related_locations"] = related
    return diag


def as_dict(report: Report) -> dict[str, Any]:
    return {"source": SOURCE, "diagnostics": [diagnostic(f) for f in report.findings]}


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    stream.write(json_text(json.dumps(as_dict(report), indent=2, ensure_ascii=False)))
    stream.write("\n")
