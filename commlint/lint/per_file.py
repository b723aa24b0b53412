"""`per-file-ignores`: codes left out in the files a glob pattern matches, as ruff matches them.

A pattern is joined to the folder of the configuration that declares it and matched against
the file's absolute path; a pattern without a slash is also matched against the file's name
(`"__init__.py"`, `"*_test.py"`). As in ruff (globset's defaults), `*` and `**` cross folders
(`"tests/*"` matches `tests/unit/test_a.py`), `?` is one character, `[abc]`/`[!abc]` classes
and `{a,b}` alternatives are understood, and a leading `!` matches the files the rest does not.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


def _expand_braces(pattern: str) -> list[str]:
    """`{a,b}` alternatives as separate patterns (innermost first; no nesting limit)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end() :]
    return [x for alt in m.group(1).split(",") for x in _expand_braces(head + alt + tail)]


def _regex(patterns: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


@dataclass(frozen=True)
class PerFileIgnore:
    pattern: str  # as written
    codes: tuple[str, ...]  # selectors: codes, prefixes, ALL
    absolute: re.Pattern[str]
    basename: re.Pattern[str] | None
    negated: bool

    @classmethod
    def build(cls, pattern: str, codes: Iterable[str], root: Path) -> PerFileIgnore:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        alternatives = _expand_braces(body)
        absolute = [
            os.path.normpath(os.path.join(root, alt)).replace(os.sep, "/") for alt in alternatives
        ]
        plain = [alt for alt in alternatives if "/" not in alt]
        return cls(
            pattern=pattern,
            codes=tuple(c.strip().upper() for c in codes),
            absolute=_regex(absolute),
            basename=_regex(plain) if plain else None,
            negated=negated,
        )

    def matches(self, path: str) -> bool:
        full = os.path.abspath(path).replace(os.sep, "/")
        hit = self.absolute.match(full) is not None or (
            self.basename is not None and self.basename.match(os.path.basename(full)) is not None
        )
        return hit != self.negated


@dataclass(frozen=True)
class PerFileIgnores:
    rules: tuple[PerFileIgnore, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    @lru_cache(maxsize=4096)  # noqa: B019 - a few instances per run, one lookup per file
    def selectors(self, path: str) -> tuple[str, ...]:
        """The selectors (codes, prefixes, ALL) ignored in `path`."""
        out: list[str] = []
        for rule in self.rules:
            if rule.matches(path):
                out.extend(rule.codes)
        return tuple(dict.fromkeys(out))

    def ignored(self, path: str, code: str) -> bool:
        return any(s == "ALL" or code.startswith(s) for s in self.selectors(path))
