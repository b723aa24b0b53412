"""Report formats. A format turns a `Report` into text; it never knows about rules.

Each writer is `write(report, stream, options) -> None`; register new ones in `FORMATS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import IO, Any

from commlint.findings import Report

Writer = Callable[[Report, IO[str], dict[str, Any]], None]

# format name -> module of `commlint.report` with its `write`; a module is imported when its
# format is used (the html writer alone loads the trace model)
FORMATS: dict[str, str] = {
    "text": "text",
    "json": "json_format",
    "concise": "concise",
    "full": "full",
    "github": "github",
    "sarif": "sarif",
    "rdjson": "rdjson",
    "html": "html",
}


def writer_for(fmt: str) -> Writer:
    """The `write` function of format `fmt`."""
    return importlib.import_module(f"commlint.report.{FORMATS[fmt]}").write


def write_report(report: Report, fmt: str, stream: IO[str], **options: Any) -> None:
    try:
        writer = writer_for(fmt)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}") from None
    writer(report, stream, options)
