"""Source positions of LibCST nodes at a fraction of `PositionProvider`'s cost.

LibCST's `PositionProvider` regenerates the module's code and, for every token, splits it on
newlines to keep a line and a column, and for every node builds `CodePosition`/`CodeRange`
objects through a generator-based context manager: a quarter of the linter's time on real
code. Here the same code generation keeps one character offset (a token's length is all it
adds) and records a node's start and end offsets as two integers; an offset becomes a line
and a column only when a position is asked for (a bisection over the line starts). The
ranges are the same as `PositionProvider`'s (the syntactic range: a node's own whitespace
excluded where LibCST records it), which tests compare node for node.
"""

from __future__ import annotations

import re
from bisect import bisect_right

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")


class _Syntactic:
    """The context manager `record_syntactic_position` hands to a node's code generation
    (a plain class: contextlib's generator machinery costs more than the code generation)."""

    __slots__ = ("end_node", "node", "start", "start_node", "state")

    def __init__(self, state: _OffsetState, node, start_node, end_node) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node

    def __enter__(self) -> None:
        self.start = self.state.offset

    def __exit__(self, *exc: object) -> None:
        spans = self.state.spans
        start = spans[id(self.start_node)][0] if self.start_node is not None else self.start
        end = spans[id(self.end_node)][1] if self.end_node is not None else self.state.offset
        spans[id(self.node)] = (start, end)


class _OffsetState(CodegenState):
    """Code generation that counts characters instead of keeping lines and columns."""

    __slots__ = ("offset", "popped", "spans", "stack", "whole")

    def __init__(self, module: cst.Module) -> None:
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.offset = 0
        self.popped = ""
        self.spans: dict[int, tuple[int, int]] = {}  # id(node) -> (start, end) offsets
        self.whole: dict[int, tuple[int, int]] = {}  # the same with the node's own whitespace
        self.stack: list[int] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.tokens.append(token)
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def before_codegen(self, node) -> None:
        self.stack.append(self.offset)

    def after_codegen(self, node) -> None:
        start = self.stack.pop()
        key = id(node)  # (a node's own __hash__ is a Python call; the tree keeps it alive)
        self.whole[key] = (start, self.offset)
        if key not in self.spans:  # a syntactic range recorded inside wins
            self.spans[key] = (start, self.offset)

    def pop_trailing_newline(self) -> None:
        if self.tokens:
            self.popped = self.tokens.pop()  # (LibCST's positions keep counting it)

    def record_syntactic_position(self, node, *, start_node=None, end_node=None) -> _Syntactic:  # type: ignore[override]
        return _Syntactic(self, node, start_node, end_node)


class Positions:
    """`positions[node]` → (start line, start column, end line, end column), lines from 1,
    columns from 0 (as LibCST's `CodeRange`)."""

    def __init__(self, module: cst.Module) -> None:
        state = _OffsetState(module)
        module._codegen(state)
        self._spans = state.spans
        self._whole = state.whole
        # the module's code as LibCST writes it back (the final newline is outside the module)
        self.code = code = "".join(state.tokens) + state.popped
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(code)]

    def _at(self, offset: int) -> tuple[int, int]:
        line = bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1]

    def __getitem__(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        start, end = self._spans[id(node)]
        return (*self._at(start), *self._at(end))

    def code_of(self, node: cst.CSTNode) -> str:
        """The node's code with its own whitespace and parentheses: `code_for_node`'s, but
        for the indentation of its inner lines (a slice, not a code generation)."""
        start, end = self._whole[id(node)]
        return self.code[start:end]

    def start_line(self, node: cst.CSTNode) -> int:
        return bisect_right(self._starts, self._spans[id(node)][0])
