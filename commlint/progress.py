"""The one progress bar of long commands (lint, dry-run): on stderr, with a count and an ETA.

Below every front end and the report formats, so the linter and the dry-run can both draw it."""

from __future__ import annotations

from typing import Any


def progress_bar(label: str, unit: str = "", console: Any = None) -> Any:
    """A transient rich `Progress`: `label`, bar, done/total `unit`, elapsed time, ETA."""
    import sys

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn()]
    if unit:
        columns.append(TextColumn(unit))
    columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(*columns, console=console or Console(file=sys.stderr), transient=True)
