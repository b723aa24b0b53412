"""Each file parsed once per `check`: the trees the extraction parsed, kept for the per-rank
evaluator of the same run, which parsed every communicating file a second time (on a 2 MB
file, 0.7 s of 9).

Kept only while a run holds the store open (`kept_trees()`), only for files extracted in this
process (a parallel run's workers keep theirs), and only up to a budget of source bytes (a
tree weighs about a hundred times its source): past it, a file is parsed again as before.
The trees are read, never changed, by both."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager

BUDGET = 4_000_000  # source bytes whose trees are kept (the largest file analysed is 2 MB)


class ParsedTrees:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.trees: dict[str, tuple[str, ast.Module]] = {}

    def keep(self, path: str, source: str, tree: ast.Module) -> None:
        if path in self.trees or self.used + len(source) > self.budget:
            return
        self.trees[path] = (source, tree)
        self.used += len(source)

    def get(self, path: str) -> tuple[str, ast.Module] | None:
        """(the source as the extraction decoded it, its tree), or None."""
        return self.trees.get(path)


_OPEN: ParsedTrees | None = None


@contextmanager
def kept_trees(budget: int | None = None) -> Iterator[ParsedTrees]:
    """The store of this run, open until the block ends (then its trees are let go)."""
    global _OPEN
    outer, _OPEN = _OPEN, ParsedTrees(BUDGET if budget is None else budget)
    try:
        yield _OPEN
    finally:
        _OPEN = outer


def open_store() -> ParsedTrees | None:
    return _OPEN


def parsed(path: str, source: str) -> ast.Module:
    """`ast.parse(source)` of the file at `path`, from the store when the extraction kept the
    tree of this very text."""
    got = _OPEN.get(path) if _OPEN is not None else None
    if got is not None and got[0] == source:
        return got[1]
    return ast.parse(source)
