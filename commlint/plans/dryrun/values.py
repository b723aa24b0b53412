"""Values that travel between simulated ranks: small real tensors and pickled objects.

Every rank runs alone, so a receive cannot wait for its sender. Instead each pass records what
every rank *sent* (keyed by the communication it belongs to), and the next pass delivers those
values to the receivers. A rank is run again only when what it would receive has changed, so
programs whose control flow never depends on received values take exactly one pass.

Keys: `("c", group, seq, op)` for the seq-th collective a rank issues on a group (every
member contributes under its global rank; a different op at the same place never pairs with
it); `("p", group, src, dst, tag, n)` for the n-th message on a point-to-point channel, and
`("s", group, src, dst, tag, n)` for that message's existence (whatever its value: a receive
from any source pairs with it); `("m", group, seq, op)` for model data issued from C++
(DDP's gradient buckets), whose signature is only who sent it (and, in the driver's exact
phase, what: see `ValueTable.exact_model`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

# Tensors larger than this are never exchanged: they carry model data, not decisions.
MAX_VALUE_BYTES = 1 << 22

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Value:
    """A tensor's content, detached from torch so it pickles cheaply between processes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @property
    def digest(self) -> str:
        h = hashlib.blake2b(self.data, digest_size=12)
        h.update(f"{self.dtype}{self.shape}".encode())
        return h.hexdigest()


@dataclass
class ValueTable:
    """What every rank contributed to each communication in the latest pass that ran it."""

    values: dict[Key, dict[int, Any]] = field(default_factory=dict)
    # Model data's values count too (not only who sent it): set once a run whose ranks
    # raised has settled otherwise (the driver's exact phase), since a program's own checks
    # of gradient sync read those values.
    exact_model: bool = False
    # rank -> the keys it contributed to (`replace_rank`), built at its first call
    _keys_of: dict[int, set[Key]] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:  # to another process: the index is rebuilt
        return {**self.__dict__, "_keys_of": None}

    def contributions(self, key: Key) -> dict[int, Any]:
        return self.values.get(key, {})

    def signature(self, key: Key, reader: int) -> tuple:
        """What `reader` can receive for `key`: the digests of the other ranks' values
        (for model data, key `("m", …)`: only which ranks sent it, unless `exact_model`)."""
        found = self.values.get(key, {})
        if key[0] == "m" and not self.exact_model:
            return tuple(sorted(r for r in found if r != reader))
        return tuple(
            sorted(
                (r, v.digest if isinstance(v, Value) else repr(v))
                for r, v in found.items()
                if r != reader
            )
        )

    def replace_rank(self, rank: int, sent: dict[Key, Any]) -> None:
        """Forget what `rank` sent in an earlier pass; keep what it sent in this one.
        Costs what the rank sent, not the whole table (4,096 ranks of rank classes)."""
        if self._keys_of is None:
            self._keys_of = {}
            for key, contrib in self.values.items():
                for r in contrib:
                    self._keys_of.setdefault(r, set()).add(key)
        for key in self._keys_of.pop(rank, ()):
            self.values.get(key, {}).pop(rank, None)
        for key, value in sent.items():
            self.values.setdefault(key, {})[rank] = value
        self._keys_of[rank] = set(sent)


# Files larger than this are handed on by name only (a reader sees the file on disk, if any).
MAX_FILE_BYTES = 1 << 22


@dataclass(frozen=True)
class WrittenFiles:
    """The files a rank wrote before a barrier: path and content (None when too large), and
    the paths it removed and the folders it made (`files.FileView`).

    Its repr — what decides whether a reader runs again — names the paths and a digest of
    each content with its numbers left out: a rank that appended its line after another's
    (accelerate's `main_process_first` check) makes the readers run again, a log rewritten
    with a new timestamp or address on every run does not make the passes churn."""

    files: tuple[tuple[str, bytes | None], ...]
    removed: tuple[str, ...] = ()
    made: tuple[str, ...] = ()

    def __repr__(self) -> str:
        files = [(p, _shape_digest(c)) for p, c in self.files]
        return f"WrittenFiles({files}, removed={list(self.removed)}, made={list(self.made)})"


_NUMBERS = re.compile(rb"0x[0-9a-fA-F]+|\d+")


def _shape_digest(content: bytes | None) -> str | None:
    if content is None:
        return None
    return hashlib.blake2b(_NUMBERS.sub(b"0", content), digest_size=8).hexdigest()
