"""`--format json`: the one JSON shape every subcommand shares.

`{"findings": [{"code", "name", "severity", "message", "path", "line", "col", "ranks",
"cycle", ...}], "summary": {...}, "errors": [{"path", "line", "message"}]}`
"""

from __future__ import annotations

import json
from typing import IO, Any

from commlint.findings import Report
from commlint.report.common import json_text


def as_dict(report: Report) -> dict[str, Any]:
    return {
        "findings": [f.model_dump(mode="json") for f in report.findings],
        "summary": report.summary(),
        "errors": [e.model_dump(mode="json") for e in report.errors],
    }


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    stream.write(json_text(json.dumps(as_dict(report), indent=2, ensure_ascii=False)))
    stream.write("\n")
