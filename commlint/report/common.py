"""Helpers shared by the machine-readable formats: rule links, paths as URIs, source lines."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from commlint.findings import Finding, Location

# Characters that are markup for a terminal or a log reader, never data: C0/C1 controls (a
# newline would start a `::error file=…` line of its own in a CI log), DEL, and the invisible
# format characters — bidi overrides and isolates, zero-width marks, line/paragraph separators,
# tag characters — that make a name display as something else (Trojan Source).
_INVISIBLE = (
    "\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f"
)
_UNSAFE = re.compile(f"[\\x00-\\x1f{_INVISIBLE}]")
_UNSAFE_IN_JSON = re.compile(f"[{_INVISIBLE}]")  # JSON escapes its own controls
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def printable(text: str, keep: str = "\t") -> str:
    """`text` with every control and invisible format character written as an escape
    (`\\n`, `\\x00`, `\\u202e`), except those in `keep`: what a file or group name holds is
    shown as data, never acted on by the terminal, the CI log or the reader's eye."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escaped(m.group()), text)


def json_text(text: str) -> str:
    """Serialised JSON with the invisible format characters (bidi overrides…) escaped as
    `\\uXXXX`: the same strings once parsed (they only ever occur inside strings, and JSON
    escapes its controls itself), but inert when the file is read by eye."""
    return _UNSAFE_IN_JSON.sub(lambda m: _json_escape(ord(m.group())), text)


def _json_escape(code: int) -> str:
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


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
    except (OSError, ValueError):  # (a name with a NUL in it is no file)
        return None
    return _read_lines(path, mtime)


def source_line(path: str | None, line: int | None) -> str | None:
    lines = source_lines(path)
    if lines is None or line is None or not 1 <= line <= len(lines):
        return None
    return lines[line - 1]


@dataclass(frozen=True)
class Span:
    """A region of a file, 1-based; `end_col` is one past the last character (as SARIF's
    `endColumn`). Fields are None where they are not known."""

    path: str
    line: int | None = None
    col: int | None = None
    end_line: int | None = None
    end_col: int | None = None


def split_site(site: str | None) -> tuple[str, int] | None:
    """A call site `file:line` (as traces and Flight Recorder frames give it) → (file, line)."""
    path, _, line = (site or "").rpartition(":")
    if path and line.isdigit() and int(line) >= 1:
        return path, int(line)
    return None


def complete(span: Span) -> Span:
    """`span` with the columns filled in from the source when only a line is known: the line
    from its first to its last non-blank character. Without readable source, a known line
    becomes the whole line from column 1 (SARIF's own default) with no end column."""
    if span.line is None or span.col is not None:
        return span
    text = source_line(span.path, span.line)
    if text is None:
        return Span(span.path, span.line, 1, span.end_line or span.line, None)
    stripped = text.rstrip()
    start = len(stripped) - len(stripped.lstrip())
    end_line = span.end_line or span.line
    end_col = len(stripped) + 1 if end_line == span.line else span.end_col
    return Span(span.path, span.line, start + 1, end_line, end_col)


def anchor(loc: Finding | Location) -> Span | None:
    """Where `loc` points in source: its own file and line, else its call site `file:line`
    (a trace action, a Flight Recorder entry's frame), else its file without a line (a plan
    file, a dump folder); None when it names no file."""
    if loc.path and loc.line is not None:
        return complete(Span(loc.path, loc.line, loc.col, loc.end_line, loc.end_col))
    site = split_site(getattr(loc, "site", None))
    if site:
        return complete(Span(*site))
    return Span(loc.path) if loc.path else None


def finding_anchor(finding: Finding, secondary: bool = True) -> Span | None:
    """The primary place of a finding: its own line; for a finding on a whole input (a dump
    folder, a trace without line numbers) the call site of the first action or cycle edge it
    names (so GitHub shows it on the source line the dump names); else its file; else the
    first located secondary location."""
    if finding.path and finding.line is not None:
        return anchor(finding)
    sites = [loc.site for loc in finding.actions] + [e.site for e in finding.cycle or ()]
    for site in sites:
        found = split_site(site)
        if found:
            return complete(Span(*found))
    if finding.path or not secondary:
        return Span(finding.path) if finding.path else None
    for loc, _ in secondary_locations(finding):
        found = anchor(loc)
        if found:
            return found
    return None


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
    """Related locations, then the trace actions with labels — but not the action the finding
    itself points at (the first one at its line, or at the call site it is shown at)."""
    out = [(rel, rel.message or "related location") for rel in finding.related]
    primary = _place(finding_anchor(finding, secondary=False))
    for act in finding.actions:
        if primary is not None and _place(anchor(act)) == primary:
            primary = None  # other ranks blocked at the same line are kept
            continue
        out.append((act, action_label(act, finding)))
    return out


def _place(span: Span | None) -> tuple[str, int] | None:
    return (span.path, span.line) if span is not None and span.line is not None else None
