"""Raw findings to reported ones: `per-file-ignores`, `# noqa` comments, and CL113 for the
codes of a `# noqa` that suppress nothing."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

from commlint.findings import Finding, Location, unvalidated
from commlint.lint.analyze import RawFinding
from commlint.lint.ir import FileFacts, Pos
from commlint.lint.noqa import NOQA_RE, CommentLines, split_lines
from commlint.lint.per_file import PerFileIgnores
from commlint.lint.source import Unreadable, decode_source

# never suppressed by a noqa directive
ENGINE_CODES = ("CL100", "CL113", "CL114")
_UNUSED = re.compile(r"`# noqa: ([A-Z]+[0-9]+(?:, [A-Z]+[0-9]+)*)` on line \d+ suppresses nothing")


def unused_noqa_codes(finding: Finding) -> list[str]:
    """The codes a CL113 finding is about (what `--fix` takes out of the comment)."""
    m = _UNUSED.match(finding.message) if finding.code == "CL113" else None
    return m.group(1).split(", ") if m else []


def _unused_message(line: int, unknown: list[str], idle: list[str]) -> tuple[str, str]:
    """One CL113 per directive, as ruff's RUF100, however many codes it names: the message
    and the fix."""
    codes = sorted(unknown + idle)
    if not idle or not unknown:
        why = "nothing to suppress" if idle else "unknown code" + ("s" if len(unknown) > 1 else "")
    else:
        s = "s" if len(unknown) > 1 else ""
        why = f"{', '.join(unknown)}: unknown code{s}; {', '.join(idle)}: nothing to suppress"
    listed = ", ".join(codes)
    return (
        f"`# noqa: {listed}` on line {line} suppresses nothing ({why})",
        f"Remove `{listed}` from the `# noqa` comment (`commlint check --fix` does it).",
    )


def to_finding(r: RawFinding) -> Finding:
    from commlint.rules import all_rules

    rule = all_rules()[r.code]
    return unvalidated(
        Finding,
        code=r.code,
        name=rule.name,
        severity=rule.severity,
        message=r.message,
        path=r.path,
        line=r.pos.line,
        col=r.pos.col,
        end_line=r.pos.end_line,
        end_col=r.pos.end_col,
        related=[
            unvalidated(
                Location,
                path=p,
                line=pos.line,
                col=pos.col,
                end_line=pos.end_line,
                end_col=pos.end_col,
                message=m,
            )
            for p, pos, m in r.related
        ],
        fix=r.fix,
    )


class Sources:
    """Each file's text, read once when a suppression needs it (from the given texts first:
    standard input)."""

    def __init__(self, given: Mapping[str, str] | None = None) -> None:
        self.texts: dict[str, str] = dict(given or {})
        self._lines: dict[str, list[str]] = {}
        self._comments: dict[str, CommentLines] = {}

    def text(self, path: str) -> str:
        if path not in self.texts:
            try:
                with open(path, "rb") as fh:
                    self.texts[path] = decode_source(fh.read()).text
            except (OSError, Unreadable):
                self.texts[path] = ""
        return self.texts[path]

    def line(self, path: str, line: int) -> str:
        if path not in self._lines:
            self._lines[path] = split_lines(self.text(path))
        lines = self._lines[path]
        return lines[line - 1].rstrip("\r\n") if 1 <= line <= len(lines) else ""

    def host(self, path: str, line: int, last: int | None = None) -> int:
        """The line whose comment speaks for `line` (the tokenizer stops after `last`, the
        file's last noqa comment: a later line has none to read)."""
        if path not in self._comments:
            self._comments[path] = CommentLines(self.text(path), last)
        return self._comments[path].host(line)


def _longest_prefix(code: str, codes: frozenset[str]) -> str | None:
    """The most specific entry of `codes` that `code` starts with (`CL101` before `CL1`):
    one set look-up per prefix, whatever the number of codes on the line."""
    for k in range(len(code), 0, -1):
        if code[:k] in codes:
            return code[:k]
    return None


def apply_suppressions(
    raw: list[RawFinding],
    facts: list[FileFacts],
    enabled: set[str],
    excluded: set[str],
    per_file: PerFileIgnores | None = None,
    sources: Sources | None = None,
) -> list[Finding]:
    """The findings left once `per-file-ignores` and `# noqa` comments have spoken, plus CL113
    for each code of a given file's `# noqa` that suppressed nothing."""
    sources = sources or Sources()
    by_path = {f.path: f for f in facts}
    cache: dict[str, set[str]] = {}

    def enabled_in(path: str) -> set[str]:
        """The codes enabled in `path`: the selection less its `per-file-ignores`."""
        if not per_file:
            return enabled
        if path not in cache:
            cache[path] = {c for c in enabled if not per_file.ignored(path, c)}
        return cache[path]

    used: set[tuple[str, int, str]] = set()
    out: list[Finding] = []
    seen: set[tuple] = set()
    last_noqa = {f.path: max(f.noqa, default=0) for f in facts}
    for r in raw:
        ident = (r.code, r.path, r.pos.line, r.pos.col, r.message)
        if ident in seen or (per_file and per_file.ignored(r.path, r.code)):
            continue
        seen.add(ident)
        # (a context file's finding is named by its relative path by now)
        ff = by_path.get(r.path) or by_path.get(os.path.abspath(r.path))
        suppressed = False
        if ff is not None and ff.noqa and r.code not in ENGINE_CODES:
            lines = [r.pos.line, r.pos.stmt_line]
            if last_noqa[ff.path] > r.pos.line and r.pos.line not in ff.noqa:
                # a line inside a multi-line string or continued: its comment comes later
                lines.append(sources.host(ff.path, r.pos.line, last_noqa[ff.path]))
            for line in dict.fromkeys(lines):
                if line not in ff.noqa:
                    continue
                codes = ff.noqa[line]
                if codes is None:
                    suppressed = True
                    break
                hit = _longest_prefix(r.code, codes)
                if hit:
                    used.add((ff.path, line, hit))
                    suppressed = True
                    break
        if not suppressed:
            out.append(to_finding(r))
    if "CL113" in enabled:
        out.extend(_unused_noqa(facts, excluded, enabled_in, used, sources))
    return out


def _unused_noqa(
    facts: list[FileFacts],
    excluded: set[str],
    enabled_in: Callable[[str], set[str]],
    used: set[tuple[str, int, str]],
    sources: Sources,
) -> list[Finding]:
    from commlint.rules import all_rules

    known = set(all_rules())
    out: list[Finding] = []
    for ff in facts:
        if ff.path in excluded or not ff.noqa:
            continue
        enabled = enabled_in(ff.path)
        if "CL113" not in enabled:
            continue
        for line, codes in sorted(ff.noqa.items()):
            if not codes:
                continue
            unused = [
                code
                for code in sorted(codes)
                if code.startswith("CL")
                and (ff.path, line, code) not in used
                and not (code in known and code not in enabled)
            ]
            if not unused:
                continue
            text = sources.line(ff.path, line)
            m = NOQA_RE.search(text)
            col = m.start() + 1 if m else (text.find("#") + 1 if "#" in text else 1)
            message, fix = _unused_message(
                line, [c for c in unused if c not in known], [c for c in unused if c in known]
            )
            out.append(
                to_finding(
                    RawFinding(
                        "CL113", message, ff.path, Pos(line, col, line, len(text) + 1, line), fix
                    )
                )
            )
    return out
