"""Report formats. A format turns a `Report` into text; it never knows about rules.

Each writer is `write(report, stream, options) -> None`; register new ones in `FORMATS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from commlint.findings import Report
from commlint.report import concise, full, github, html, json_format, rdjson, sarif, text

Writer = Callable[[Report, IO[str], dict[str, Any]], None]

FORMATS: dict[str, Writer] = {
    "text": text.write,
    "json": json_format.write,
    "concise": concise.write,
    "full": full.write,
    "github": github.write,
    "sarif": sarif.write,
    "rdjson": rdjson.write,
    "html": html.write,
}


def write_report(report: Report, fmt: str, stream: IO[str], **options: Any) -> None:
    try:
        writer = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}") from None
    writer(report, stream, options)
