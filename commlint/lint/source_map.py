"""Positions and source text of CPython `ast` nodes, as the linter reports them.

The linter's findings keep the positions and texts it reported when it analysed LibCST
trees, which differ from `ast`'s in three ways, all handled here:

- columns count characters (`ast` counts UTF-8 bytes: a line with `"ünï"` before a call);
- a node's *position* leaves out its own parentheses, also for a parenthesised tuple and a
  generator expression (whose `ast` span includes them, or the parentheses of the call it is
  the only argument of);
- a node's *text* keeps its own parentheses (`(rank == 0)`), but not those of the call it is
  an argument of (`f((x))` → `(x)`), with whitespace runs made one space.

A parenthesis pair is a node's own when it holds nothing else and the `(` does not follow an
expression (`f(`, `A(`, `x[0](`: a call's or a class's) but an operator, a keyword or another
bracket. Comments between a parenthesis and the node are skipped.
"""

from __future__ import annotations

import ast
import keyword
import re
from bisect import bisect_right

_NEWLINE = re.compile(r"\r\n?|\n")
_SPACE = frozenset(" \t\x0c\\\r\n")
_KEYWORDS = frozenset(keyword.kwlist)  # (not `match`/`case`: `re.match(x)` is a call)


class SourceMap:
    """One file's source, to answer positions and texts of its `ast` nodes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
        self._wide: dict[int, bytes] = {}  # line -> its UTF-8 bytes (non-ASCII lines only)
        self._ascii = source.isascii()  # byte columns are character columns throughout

    # ------------------------------------------------------------ offsets
    def offset(self, line: int, col: int) -> int:
        """The character offset of `ast`'s (line, byte column)."""
        start = self.starts[line - 1]
        if col == 0 or self._ascii:
            return start + col
        wide = self._wide.get(line)
        if wide is None:
            end = self.starts[line] if line < len(self.starts) else len(self.source)
            text = self.source[start:end]
            if text.isascii():
                return start + col
            wide = self._wide[line] = text.encode("utf-8", "surrogatepass")
        return start + len(wide[:col].decode("utf-8", "replace"))

    def line_col(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1]

    def span(self, node: ast.AST) -> tuple[int, int]:
        """`ast`'s span of `node` as character offsets."""
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    # ----------------------------------------------------------- questions
    def pos(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(start line, start column, end line, end column): lines from 1, columns from 0,
        in characters, the node's own parentheses left out."""
        start, end = self.syntactic(node)
        return (*self.line_col(start), *self.line_col(end))

    def start_line(self, node: ast.AST) -> int:
        return node.lineno  # type: ignore[attr-defined]

    def syntactic(self, node: ast.AST) -> tuple[int, int]:
        start, end = self.span(node)
        if isinstance(node, ast.GeneratorExp) or (
            isinstance(node, ast.Tuple) and self._parenthesised(node, start)
        ):
            return self._inside(start, end)
        return start, end

    def text(self, node: ast.AST) -> str:
        """The node's code with its own parentheses, whitespace runs made one space."""
        start, end = self.syntactic(node)
        if isinstance(node, ast.Tuple) and start != self.span(node)[0]:
            start, end = self.span(node)  # its parentheses are its own
        start, end = self._own_parens(start, end)
        return " ".join(self.source[start:end].split())

    def segment(self, start_node: ast.AST, end_node: ast.AST) -> str:
        """The code from one node's start to another's end, whitespace runs made one space."""
        start = self.span(start_node)[0]
        end = self.span(end_node)[1]
        return " ".join(self.source[start:end].split())

    def semicolon_after(self, node: ast.AST) -> bool:
        """Whether a `;` follows the statement on its line."""
        s = self.source
        j = self.span(node)[1]
        while j < len(s) and s[j] in " \t\x0c":
            j += 1
        return j < len(s) and s[j] == ";"

    def is_elif(self, node: ast.If) -> bool:
        """Whether an `if`'s else branch is an `elif` (not an `if` alone under `else:`)."""
        if len(node.orelse) != 1 or not isinstance(node.orelse[0], ast.If):
            return False
        inner = node.orelse[0]
        return self.source.startswith("elif", self.offset(inner.lineno, inner.col_offset))

    # ------------------------------------------------------------- helpers
    def _parenthesised(self, node: ast.Tuple, start: int) -> bool:
        """Whether a tuple's `ast` span holds its parentheses (`(a, b)`, not `(a), b`)."""
        if self.source[start] != "(":
            return False
        if not node.elts:
            return True
        first = node.elts[0]
        inner_start, inner_end = self.syntactic(first)
        return start < self._own_parens(inner_start, inner_end)[0]

    def _inside(self, start: int, end: int) -> tuple[int, int]:
        """Within the parentheses at `start` and `end - 1`, the space next to them left out."""
        s = self.source
        i, j = start + 1, end - 1
        while i < j and s[i] in _SPACE:
            i += 1
        while j > i and s[j - 1] in _SPACE:
            j -= 1
        return i, j

    def _own_parens(self, start: int, end: int) -> tuple[int, int]:
        s = self.source
        n = len(s)
        while True:
            i = self._back(start)
            if i < 0 or s[i] != "(":
                return start, end
            j = self._forward(end)
            if j >= n or s[j] != ")":
                return start, end
            if self._follows_expression(i):
                return start, end  # a call's or a class's parentheses
            start, end = i, j + 1

    def _follows_expression(self, i: int) -> bool:
        k = self._back(i)
        if k < 0:
            return False
        c = self.source[k]
        if c in ")]\"'":
            return True
        if not (c.isalnum() or c == "_"):
            return False
        w = k
        while w > 0 and (self.source[w - 1].isalnum() or self.source[w - 1] == "_"):
            w -= 1
        return self.source[w : k + 1] not in _KEYWORDS

    def _back(self, i: int) -> int:
        """The offset of the last code character before `i` (comments skipped), or -1."""
        s = self.source
        while i > 0:
            c = s[i - 1]
            if c in "\r\n":
                i -= 1
                # the start of the line this newline ends (a search back for `\r` in a file
                # without one went to the file's start: quadratic on a 2 MB file)
                line_start = self.starts[bisect_right(self.starts, i) - 1]
                hash_at = _comment_start(s, line_start, i)
                if hash_at is not None:
                    i = hash_at
                continue
            if c in _SPACE:
                i -= 1
                continue
            return i - 1
        return -1

    def _forward(self, j: int) -> int:
        """The offset of the first code character at or after `j` (comments skipped)."""
        s = self.source
        n = len(s)
        while j < n:
            c = s[j]
            if c in _SPACE:
                j += 1
            elif c == "#":
                m = _NEWLINE.search(s, j)
                j = m.start() if m else n
            else:
                return j
        return n


def _comment_start(s: str, start: int, end: int) -> int | None:
    """Where the comment of the line s[start:end] begins (quotes of one-line strings
    respected), None without one."""
    if "#" not in s[start:end]:
        return None
    quote = ""
    k = start
    while k < end:
        c = s[k]
        if quote:
            if c == "\\":
                k += 2
                continue
            if s.startswith(quote, k):
                k += len(quote)
                quote = ""
                continue
        elif c in "\"'":
            quote = s[k : k + 3] if s[k : k + 3] in ('"""', "'''") else c
            k += len(quote)
            continue
        elif c == "#":
            return k
        k += 1
    return None


class Arg:
    """One argument of a call, in source order: its value, its keyword, its star."""

    __slots__ = ("keyword", "star", "value")

    def __init__(self, value: ast.expr, keyword: str | None, star: str) -> None:
        self.value = value
        self.keyword = keyword
        self.star = star


def call_args(node: ast.Call) -> list[Arg]:
    """A call's arguments as written: positional, `*x`, `k=v` and `**kw` in source order."""
    out = [
        Arg(a.value, None, "*") if isinstance(a, ast.Starred) else Arg(a, None, "")
        for a in node.args
    ]
    if not node.keywords:
        return out
    kws = [Arg(k.value, k.arg, "" if k.arg is not None else "**") for k in node.keywords]
    if not out:
        return kws
    keyed = [((a.value.lineno, a.value.col_offset), a) for a in out]
    keyed += [((k.lineno, k.col_offset), a) for k, a in zip(node.keywords, kws, strict=True)]
    keyed.sort(key=lambda p: p[0])
    return [a for _, a in keyed]
