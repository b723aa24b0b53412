"""`--format concise`: one line per finding, `path:line:col: CODE message`, as ruff and grep."""

from __future__ import annotations

from typing import IO, Any

from commlint.findings import Finding, Report
from commlint.report.common import printable
from commlint.report.text import summary_line


def one_line(finding: Finding) -> str:
    message = " ".join(finding.message.split())
    return f"{finding.where()}: {finding.code} {message}"


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    for finding in report.findings:
        stream.write(printable(one_line(finding)) + "\n")
    stream.write(summary_line(report) + "\n")
