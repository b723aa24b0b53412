"""`# noqa` comments: which line's comment suppresses a finding, and the two edits ruff users
know, `--add-noqa` (write the codes of today's findings) and the fix of CL113 (take out the
codes that suppress nothing). Every pass is linear in the file and in the number of codes.

A comment can be written only at the end of a line where the tokenizer is neither inside a
string nor after a backslash continuation: the lines that end in a NEWLINE or NL token. A
finding on a line that cannot hold a comment (the first line of a multi-line string, a
continued line) is suppressed by the comment at the end of the first line after it that can,
as in ruff; `--add-noqa` writes there.
"""

from __future__ import annotations

import bisect
import io
import re
import tokenize
from collections.abc import Iterable, Mapping

# The same expression as `commlint.lint.extract.NOQA_RE`, which reads the comments (a test
# keeps them equal): a bare directive, or one with a colon and codes separated by commas or
# blanks.
NOQA_RE = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
CODE_RE = re.compile(r"[A-Z]+[0-9]+", re.I)
SEPARATOR = re.compile(r"([\s,]+)")
LINE_END = re.compile(r"\r\n|\n|\r")


class CommentLines:
    """Where comments are and where they can go, from one pass of the tokenizer."""

    def __init__(self, source: str, last: int | None = None) -> None:
        self.hosts: list[int] = []  # sorted lines whose end can hold a comment
        self.comments: dict[int, tuple[int, str]] = {}  # line -> (column, comment text)
        try:
            for tok in tokenize.generate_tokens(io.StringIO(source).readline):
                if last is not None and tok.start[0] > last:
                    break
                if tok.type in (tokenize.NEWLINE, tokenize.NL):
                    if not self.hosts or self.hosts[-1] != tok.start[0]:
                        self.hosts.append(tok.start[0])
                elif tok.type == tokenize.COMMENT:
                    self.comments[tok.start[0]] = (tok.start[1], tok.string)
        except (tokenize.TokenError, SyntaxError):  # CPython compiled it: not expected
            pass

    def host(self, line: int) -> int:
        """The line whose comment speaks for `line`."""
        k = bisect.bisect_left(self.hosts, line)
        return self.hosts[k] if k < len(self.hosts) else line


def split_lines(source: str) -> list[str]:
    """The lines as the tokenizer numbers them (`io.StringIO.readline`), with their ends."""
    return io.StringIO(source).readlines()


def _body_and_end(line: str) -> tuple[str, str]:
    m = LINE_END.search(line, max(0, len(line) - 2))
    return (line[: m.start()], line[m.start() :]) if m else (line, "")


def _appended(body: str, codes: set[str]) -> str:
    return body.rstrip(" \t") + "  # noqa: " + ", ".join(sorted(codes))


def noqa_codes(comment: str) -> tuple[re.Match[str] | None, list[str]]:
    """The directive in a comment and its codes, upper-cased, in order."""
    m = NOQA_RE.search(comment)
    if m is None or m.group("codes") is None:
        return m, []
    return m, [c.upper() for c in CODE_RE.findall(m.group("codes"))]


def add_noqa(source: str, wanted: Mapping[int, Iterable[str]]) -> tuple[str, int]:
    """`source` with `# noqa: CODES` for the findings at each line of `wanted` (merged into the
    line's existing directive, codes sorted and unique) and the number of lines changed."""
    if not wanted:
        return source, 0
    where = CommentLines(source)
    per_host: dict[int, set[str]] = {}
    for line, codes in wanted.items():
        per_host.setdefault(where.host(line), set()).update(c.upper() for c in codes)
    lines = split_lines(source)
    changed = 0
    for host, codes in sorted(per_host.items()):
        if not codes or not 1 <= host <= len(lines):
            continue
        body, end = _body_and_end(lines[host - 1])
        comment = where.comments.get(host)
        if comment is None:
            new = _appended(body, codes)
        else:
            col, text = comment
            m, have = noqa_codes(text)
            if m is not None and m.group("codes") is None:
                continue  # a bare directive already suppresses everything here
            if m is None:
                new = _appended(body, codes)
            else:
                merged = sorted(set(have) | codes)
                if merged == have:
                    continue
                start, stop = col + m.start("codes"), col + m.end("codes")
                new = body[:start] + ", ".join(merged) + body[stop:]
        if new != body:
            lines[host - 1] = new + end
            changed += 1
    return "".join(lines), changed


def _without(codes_text: str, drop: set[str]) -> str:
    """The codes of a directive without those in `drop`; what stays is untouched, with the
    separator that followed it in the comment (none after the last one kept)."""
    parts = SEPARATOR.split(codes_text)  # code, separator, code, ..., code
    codes, separators = parts[0::2], parts[1::2]
    keep = [k for k, code in enumerate(codes) if code.upper() not in drop]
    out: list[str] = []
    for n, k in enumerate(keep):
        out.append(codes[k])
        if n + 1 < len(keep):
            out.append(separators[k])
    return "".join(out)


def remove_noqa_codes(
    source: str, unused: Mapping[int, Iterable[str]]
) -> tuple[str, list[tuple[int, str]]]:
    """`source` without the codes of `unused` in the directives of their lines (a directive
    left without codes goes, and its comment with it when nothing else is in it); and the
    (line, code) pairs taken out. Everything else stays byte for byte."""
    removed: list[tuple[int, str]] = []
    if not unused:
        return source, removed
    where = CommentLines(source, last=max(unused))
    lines = split_lines(source)
    for line, codes in sorted(unused.items()):
        drop = {c.upper() for c in codes}
        comment = where.comments.get(line)
        if comment is None or not 1 <= line <= len(lines):
            continue
        col, text = comment
        m, have = noqa_codes(text)
        if m is None or not have:
            continue
        gone = drop & set(have)
        if not gone:
            continue
        removed.extend((line, code) for code in sorted(gone))
        body, end = _body_and_end(lines[line - 1])
        rest = _without(m.group("codes"), drop)
        if rest:
            start, stop = col + m.start("codes"), col + m.end("codes")
            lines[line - 1] = body[:start] + rest + body[stop:] + end
            continue
        before, after = text[: m.start()], text[m.end() :]
        if before.strip():  # another comment before the directive stays
            new_text = before.rstrip() + (after if after.strip() else "")
        elif after.strip():  # `# noqa: CL101 why`: the words stay a comment
            tail = after.lstrip()
            new_text = tail if tail.startswith("#") else "# " + tail
        else:
            new_text = ""
        code = body[:col]
        lines[line - 1] = (code + new_text if new_text else code.rstrip(" \t")) + end
    return "".join(lines), removed
