"""`--statistics`: how many findings per rule code, most frequent first (as ruff).

Tab-separated columns, padded: count, code, severity, rule name::

    12\tCL101\t[error]  \tconditional-collective
     3\tCL111\t[warning]\tunwaited-async-handle

`write_statistics(report, stream, fmt)` prints this table for the text-like formats and a
JSON list `[{"code", "name", "severity", "count"}]` for `json`; commands call it instead of
the report writer when the user passes `--statistics`.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import IO, Any

from commlint.findings import Report


def statistics(report: Report) -> list[dict[str, Any]]:
    """One entry per code: code, name, severity, count; by count (descending), then code."""
    counts = Counter(f.code for f in report.findings)
    first = {}
    for finding in report.findings:
        first.setdefault(finding.code, finding)
    rows = [
        {
            "code": code,
            "name": first[code].name,
            "severity": first[code].severity,
            "count": count,
        }
        for code, count in counts.items()
    ]
    rows.sort(key=lambda row: (-row["count"], row["code"]))
    return rows


def write_statistics(report: Report, stream: IO[str], fmt: str = "text") -> None:
    rows = statistics(report)
    if fmt == "json":
        json.dump(rows, stream, indent=2)
        stream.write("\n")
        return
    if not rows:
        return
    count_w = max(len(str(row["count"])) for row in rows)
    code_w = max(len(row["code"]) for row in rows)
    sev_w = max(len(row["severity"]) for row in rows) + 2
    for row in rows:
        severity = f"[{row['severity']}]"
        stream.write(
            f"{row['count']:>{count_w}}\t{row['code']:<{code_w}}\t{severity:<{sev_w}}\t"
            f"{row['name']}".rstrip()
            + "\n"
        )
