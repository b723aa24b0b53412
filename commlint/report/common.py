"""Helpers shared by the machine-readable formats: rule links, paths as URIs, source lines."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from commlint.findings import Finding, Location

# Rule pages live in docs/rules/CODE.md of the repository; override the base for a fork or
# a mirror with COMMLINT_DOCS_URL (must end with a slash).
DEFAULT_DOCS_URL = "https://github.com/commlint/commlint/blob/main/docs/rules/"
PROJECT_URL = "https://github.com/commlint/commlint"


def rule_url(code: str) -> str:
    """The docs page of a rule, `…/docs/rules/CL101.md`."""
    base = os.environ.get("COMMLINT_DOCS_URL") or DEFAULT_DOCS_URL
    if not base.endswith("/"):
        base += "/"
    return f"{base}{code}.md"


def posix_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it, with `/` separators."""
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.relative_to(Path.cwd())
        except ValueError:
            return p.as_posix()
    text = p.as_posix()
    return text[2:] if text.startswith("./") else text


def artifact_uri(path: str) -> tuple[str, bool]:
    """A URI for `path` and whether it is relative (to the source root) or absolute."""
    rel = posix_path(path)
    if PurePosixPath(rel).is_absolute():
        return Path(rel).as_uri(), False
    return quote(rel, safe="/"), True


@lru_cache(maxsize=256)
def _read_lines(path: str, mtime_ns: int) -> tuple[str, ...] | None:
    try:
        with open(path, encoding="utf-8", errors="replace", newline=None) as fh:
            return tuple(fh.read().splitlines())
    except OSError:
        return None


def source_lines(path: str | None) -> tuple[str, ...] | None:
    """The file's lines (no line ends), or None when it cannot be read."""
    if not path:
        return None
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return _read_lines(path, mtime)


def source_line(path: str | None, line: int | None) -> str | None:
    lines = source_lines(path)
    if lines is None or line is None or not 1 <= line <= len(lines):
        return None
    return lines[line - 1]


def located(loc: Location) -> bool:
    """A location a format can point at: a file and a line."""
    return bool(loc.path) and loc.line is not None


def fingerprint(finding: Finding) -> str:
    """A stable identity for a finding that survives unrelated edits moving it up or down.

    Built from the rule, the file and the text of the flagged line (not its number); a
    finding without source text falls back to its message and ranks.
    """
    text = source_line(finding.path, finding.line)
    anchor = " ".join(text.split()) if text is not None else finding.message
    key = "\x1f".join(
        [finding.code, posix_path(finding.path) if finding.path else "", anchor]
        + [str(r) for r in finding.ranks]
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def action_label(loc: Location, finding: Finding) -> str:
    """`rank 1, action 0: send(→0) waits for rank 0 @train.py:13`, or the location's message."""
    if loc.message:
        return loc.message
    label = f"rank {loc.rank}" if loc.rank is not None else "action"
    if loc.action is not None:
        label += f", action {loc.action}"
    for edge in finding.cycle or ():
        if edge.rank == loc.rank and edge.action == loc.action:
            label += f": {edge.op} waits for rank {edge.waits_for}"
    if loc.site:
        label += f" @{loc.site}"
    return label


def secondary_locations(finding: Finding) -> list[tuple[Location, str]]:
    """Related locations, then the trace actions not at the primary location, with labels."""
    out = [(rel, rel.message or "related location") for rel in finding.related]
    for act in finding.actions:
        if act.path == finding.path and act.line == finding.line:
            continue
        out.append((act, action_label(act, finding)))
    return out
