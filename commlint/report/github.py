"""`--format github`: GitHub Actions workflow commands, one annotation per finding.

`::error file=…,line=…,col=…,endLine=…,endColumn=…,title=…::message`, escaped as the
Actions toolkit does: in the message `%`, CR and LF; in property values also `:` and `,`.
"""

from __future__ import annotations

from typing import IO, Any

from commlint.findings import Finding, InputError, Report
from commlint.report.common import Span, finding_anchor, posix_path, printable


def escape_data(text: str) -> str:
    # NUL, other controls and bidi overrides are escaped as data; CR and LF as the toolkit does
    text = printable(text, keep="\r\n")
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, properties: dict[str, object], message: str) -> str:
    props = ",".join(
        f"{key}={escape_property(str(value))}"
        for key, value in properties.items()
        if value is not None
    )
    return f"::{kind}{' ' + props if props else ''}::{escape_data(message)}"


def _message(finding: Finding, span: Span | None) -> str:
    lines = [finding.message]
    if span is not None and finding.path and span.path != finding.path:
        lines.append(f"input: {posix_path(finding.path)}")  # e.g. the Flight Recorder dumps
    for rel in finding.related:
        if rel.path and rel.line is not None:
            lines.append(f"note: {posix_path(rel.path)}:{rel.line}: {rel.message or ''}".rstrip())
    if finding.fix:
        lines.append(f"fix: {finding.fix}")
    return "\n".join(lines)


def annotation(finding: Finding) -> str:
    # A finding on a whole input (a Flight Recorder dump folder) is shown on the source line
    # of the first action it names, where GitHub can display it.
    span = finding_anchor(finding)
    has_line = span is not None and span.line is not None
    one_line = has_line and span.end_line in (None, span.line)  # type: ignore[union-attr]
    properties: dict[str, object] = {
        "file": posix_path(span.path) if span else None,
        "line": span.line if has_line else None,  # type: ignore[union-attr]
        # GitHub honours columns only for an annotation on a single line.
        "col": span.col if one_line else None,  # type: ignore[union-attr]
        "endLine": span.end_line if has_line else None,  # type: ignore[union-attr]
        "endColumn": span.end_col if one_line else None,  # type: ignore[union-attr]
        "title": f"commlint {finding.code} ({finding.name})" if finding.name else finding.code,
    }
    kind = "error" if finding.severity == "error" else "warning"
    return command(kind, properties, _message(finding, span))


def input_error(error: InputError) -> str:
    properties: dict[str, object] = {
        "file": posix_path(error.path) if error.path else None,
        "line": error.line,
        "col": error.col if error.line is not None else None,
        "title": "commlint input error",
    }
    return command("error", properties, error.message)


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    for error in report.errors:
        stream.write(input_error(error) + "\n")
    for finding in report.findings:
        stream.write(annotation(finding) + "\n")
