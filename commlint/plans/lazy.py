"""Generated traces whose ranks are built on first access.

A generated 1,024-rank plan holds 614k actions, 229k of them distinct point-to-point objects;
building them all costs 0.8 s, while the checker, given the generator's symmetry certificate
(`commlint.graph.symmetry`), reads 8 ranks. `LazyRanks` is the `Trace.ranks` dict of such a
plan: every rank is a key from the start, and a rank's action list is built the first time
anything reads it (`ranks[r]`, `get`, `values`, `items`, iteration of values, comparison,
copying, pickling). So a clean plan costs what its representatives cost, and a plan with
findings, which the checker then reads whole, costs what it did before.

What the certificate needs: `generated[r]` is rank `r`'s actions as built (a tuple), or None
while it was never built — and then it is still as generated, because every way to change a
rank (`ranks[r] = …`, `del`, `pop`, `update`, or editing the list `ranks[r]` returns) builds it
first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from commlint.trace import Action, Trace


class _Unbuilt:
    """The stored value of a rank not built yet. Code that reads the dict's storage directly,
    past its methods, meets this object and fails loudly instead of seeing no actions."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<rank not built yet: read it through trace.ranks[rank]>"


UNBUILT = _Unbuilt()


class LazyRanks(dict):
    """`rank -> list[Action]`, each list built by `build(rank)` when first read."""

    __slots__ = ("_build", "_compact", "generated")

    def __init__(
        self,
        ranks: Iterable[int],
        build: Callable[[int], list[Action]],
        compact: dict[int, list[tuple]] | None = None,
    ) -> None:
        super().__init__(dict.fromkeys(ranks, UNBUILT))
        self._build = build
        self._compact = compact
        self.generated: dict[int, tuple | None] = dict.fromkeys(self)

    def compact_rows(self, rank: int) -> list[tuple] | None:
        """Rank `rank`'s actions as compact rows (tuples laid out as `commlint.trace.CompactRow`)
        while the rank was never built: the checker reads these without building an object
        per action."""
        if self._compact is None or dict.get(self, rank) is not UNBUILT:
            return None
        return self._compact.get(rank)

    def action_count(self, rank: int) -> int:
        """len(ranks[rank]), without building a rank that has compact rows."""
        rows = self.compact_rows(rank)
        return len(rows) if rows is not None else len(self[rank])

    def _built(self, rank: int) -> list[Action]:
        acts = self._build(rank)
        self.generated[rank] = tuple(acts)
        dict.__setitem__(self, rank, acts)
        return acts

    def build_all(self) -> None:
        """Build every rank not built yet."""
        for rank, acts in dict.items(self):
            if acts is UNBUILT:
                self._built(rank)

    def unbuilt(self) -> int:
        """How many ranks were never read."""
        return sum(1 for acts in dict.values(self) if acts is UNBUILT)

    # reading one rank
    def __getitem__(self, rank: int) -> list[Action]:
        acts = dict.__getitem__(self, rank)
        return self._built(rank) if acts is UNBUILT else acts

    def get(self, rank: int, default: Any = None) -> Any:
        if rank in self:
            return self[rank]
        return default

    def __iter__(self) -> Iterator[int]:
        # defined in Python on purpose: `dict(ranks)` and `{**ranks}` then go through
        # keys() and __getitem__ instead of copying the stored values
        return dict.__iter__(self)

    # reading every rank
    def values(self):  # type: ignore[override]
        self.build_all()
        return dict.values(self)

    def items(self):  # type: ignore[override]
        self.build_all()
        return dict.items(self)

    def __eq__(self, other: object) -> bool:
        self.build_all()
        if isinstance(other, LazyRanks):
            other.build_all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self.build_all()
        return dict.__repr__(self)

    def copy(self) -> dict[int, list[Action]]:  # type: ignore[override]
        self.build_all()
        return dict(dict.items(self))

    def __copy__(self) -> dict[int, list[Action]]:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> dict[int, list[Action]]:
        return copy.deepcopy(self.copy(), memo)

    def __reduce__(self) -> tuple:
        return (dict, (self.copy(),))

    def __or__(self, other: Any) -> dict:
        return self.copy() | other

    def __ror__(self, other: Any) -> dict:
        self.build_all()
        return other | self.copy()

    # changing ranks: build first, so `generated` keeps what the generator made
    def __setitem__(self, rank: int, acts: list[Action]) -> None:
        if dict.get(self, rank) is UNBUILT:
            self._built(rank)
        dict.__setitem__(self, rank, acts)

    def __delitem__(self, rank: int) -> None:
        self[rank]
        dict.__delitem__(self, rank)

    def pop(self, rank: int, *default: Any) -> Any:
        if rank in self:
            self[rank]
        return dict.pop(self, rank, *default)

    def popitem(self) -> tuple[int, list[Action]]:
        self.build_all()
        return dict.popitem(self)

    def setdefault(self, rank: int, default: Any = None) -> Any:
        if rank in self:
            return self[rank]
        return dict.setdefault(self, rank, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.build_all()
        dict.update(self, *args, **kwargs)

    def __ior__(self, other: Any) -> LazyRanks:
        self.update(other)
        return self

    def clear(self) -> None:
        self.build_all()
        dict.clear(self)


class GeneratedTrace(Trace):
    """A `Trace` whose `ranks` may be a `LazyRanks`: serialising, comparing or copying it
    builds every rank first (pydantic reads a dict's storage directly)."""

    def _build_all(self) -> None:
        ranks = self.__dict__.get("ranks")
        if isinstance(ranks, LazyRanks):
            ranks.build_all()

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._build_all()
        return super().model_dump(*args, **kwargs)

    def model_dump_json(self, *args: Any, **kwargs: Any) -> str:
        self._build_all()
        return super().model_dump_json(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        self._build_all()
        if isinstance(other, GeneratedTrace):
            other._build_all()
        return super().__eq__(other)

    def __getstate__(self) -> dict[Any, Any]:
        self._build_all()
        return super().__getstate__()


__all__ = ["UNBUILT", "GeneratedTrace", "LazyRanks"]
