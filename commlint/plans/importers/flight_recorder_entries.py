"""One Flight Recorder dump checked field by field: every entry's op, sizes, dtypes, frames,
process group and sequence ids as Flight Recorder writes them, held column by column
(`_Columns`), within a budget proportional to the dump's size; a field that is not what
Flight Recorder writes is a located input error (`_Bad`, located by the caller).

Second stage of `commlint.plans.importers.flight_recorder` (after `flight_recorder_files`)."""

from __future__ import annotations

import ast
import json
import marshal
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice
from operator import attrgetter, itemgetter, lt
from typing import Any

from commlint.findings import CommlintInputError
from commlint.plans.importers.flight_recorder_files import _INTERNAL, _MAX_RANK, _Bad, _kind

# --- one dump, checked field by field ------------------------------------------------------


class _Entry:
    """One checked entry: the fields the reader uses (frames checked when a site is needed)."""

    __slots__ = (
        "backend",
        "cols",
        "desc",
        "detail",
        "frames",
        "group",
        "in_dtypes",
        "in_sizes",
        "index",
        "out_dtypes",
        "out_sizes",
        "p2p",
        "p2p_seq",
        "pg",
        "pos",
        "raw",
        "record_id",
        "seq",
        "state",
        "walk",
    )

    # `group` (the trace group) is set once membership is known, in `_to_trace`; `cols` and
    # `pos`: the rank's `_Columns` and the entry's place in them (frames read again from there)


def _seq(value: Any, key: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 20:
        return int(value)  # torch's own tests write sequence ids as strings
    raise _Bad(f"'{key}' is {_kind(value)}, not an integer")


class _Walk:
    """The budget of list items one dump may cost to check (see `NODES_PER_BYTE`)."""

    def __init__(self, budget: int | None) -> None:
        self.left = budget if budget is not None else -1
        # while one dump is read: each distinct (frames, sizes, dtypes) of its entries, by
        # value (see `_check_entry`); dropped when the dump is done
        self.shared: dict[bytes, tuple] | None = {}

    def spend(self, n: int) -> None:
        if self.left < 0:
            return
        self.left -= n
        if self.left < 0:
            raise _Bad(
                "holds far more data than its size allows (shared references in a pickle?); "
                "refusing to walk it"
            )


def _sizes(value: Any, key: str, walk: _Walk) -> list[list[int]]:
    if value is None:
        return []
    if type(value) is not list and type(value) is not tuple:
        raise _Bad(f"'{key}' is {_kind(value)}, not a list of shapes")
    n = len(value)
    for shape in value:
        if type(shape) is not list and type(shape) is not tuple:
            raise _Bad(f"'{key}' holds {_kind(shape)}, not a shape (list of integers)")
        n += len(shape)
        if n > walk.left >= 0:
            walk.spend(n)  # raises: the budget is spent
        for d in shape:
            if type(d) is not int or d < 0:
                raise _Bad(f"'{key}' holds a dimension that is not a non-negative integer")
    if walk.left >= 0:
        walk.left -= n
    return value  # type: ignore[return-value]


def _dtypes(value: Any, key: str, walk: _Walk) -> list[str]:
    if value is None:
        return []
    if type(value) is str:
        return [value] if value else []  # torch's own tests write one dtype as a string
    if type(value) is not list and type(value) is not tuple:
        raise _Bad(f"'{key}' is {_kind(value)}, not a list of dtype names")
    for d in value:
        if type(d) is not str:
            raise _Bad(f"'{key}' holds {_kind(d)}, not a dtype name")
    if walk.left >= 0:
        walk.spend(len(value))
    return value  # type: ignore[return-value]


def _frames(value: Any, walk: _Walk) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise _Bad(f"'frames' is {_kind(value)}, not a list")
    walk.spend(len(value))
    for f in value:
        if type(f) is not dict:
            raise _Bad(f"'frames' holds {_kind(f)}, not a frame (dict)")
        filename, name, line = f.get("filename"), f.get("name"), f.get("line")
        if filename is not None and type(filename) is not str:
            raise _Bad(f"a frame's 'filename' is {_kind(filename)}, not a string")
        if name is not None and type(name) is not str:
            raise _Bad(f"a frame's 'name' is {_kind(name)}, not a string")
        if line is not None and type(line) is not int:
            raise _Bad(f"a frame's 'line' is {_kind(line)}, not an integer")
    return value  # type: ignore[return-value]


def _pg_field(value: Any) -> tuple[str, str]:
    if (type(value) is tuple or type(value) is list) and len(value) == 2:
        name, desc = value
        if type(name) is str and type(desc) is str:
            return name, desc
    if not isinstance(value, (list, tuple)) or not value:
        raise _Bad(f"'process_group' is {_kind(value)}, not a (name, description) pair")
    for part in value[:2]:
        if not isinstance(part, (str, int)) or isinstance(part, bool):
            raise _Bad(f"'process_group' holds {_kind(part)}, not a name")
    return str(value[0]), str(value[1]) if len(value) > 1 else ""


def _check_entry(index: int, e: Any, walk: _Walk) -> _Entry:
    if type(e) is not dict:
        raise _Bad(f"is {_kind(e)}, not a dict")
    if "profiling_name" not in e or "process_group" not in e or "collective_seq_id" not in e:
        key = next(
            k for k in ("profiling_name", "process_group", "collective_seq_id") if k not in e
        )
        raise _Bad(f"missing '{key}'")
    profiling = e["profiling_name"]
    if type(profiling) is not str:
        raise _Bad(f"'profiling_name' is {_kind(profiling)}, not a string")
    # plain integers and one-dtype lists inline: this runs once per entry of every dump
    x = _Entry()
    x.index = index
    rid = e.get("record_id")
    x.record_id = rid if type(rid) is int else index if rid is None else _seq(rid, "record_id")
    pg = e["process_group"]
    if type(pg) is tuple and len(pg) == 2 and type(pg[0]) is str and type(pg[1]) is str:
        x.pg, x.desc = pg
    else:
        x.pg, x.desc = _pg_field(pg)
    x.backend, x.raw, x.detail = _split_profiling_name(profiling)
    seq = e["collective_seq_id"]
    x.seq = seq if type(seq) is int else _seq(seq, "collective_seq_id")
    p2p_seq = e.get("p2p_seq_id")
    x.p2p_seq = (
        p2p_seq if type(p2p_seq) is int else 0 if p2p_seq is None else _seq(p2p_seq, "p2p_seq_id")
    )
    state = e.get("state")
    if state is not None and type(state) is not str:
        raise _Bad(f"'state' is {_kind(state)}, not a string")
    x.state = state or ""
    is_p2p = e.get("is_p2p")
    if is_p2p is not None and not isinstance(is_p2p, (bool, int)):
        raise _Bad(f"'is_p2p' is {_kind(is_p2p)}, not a boolean")
    x.p2p = bool(is_p2p) or x.raw in ("send", "recv")
    # An entry's frames, sizes and dtypes (frames checked when a site is needed, `_site`;
    # sizes and dtypes by `_check_payload`) are shared with the earlier entries of the dump
    # that hold the same values: this path reads dumps the column reader (`_fast_columns`)
    # does not take, which may still be big. `marshal` tells 1, 1.0 and True apart, as the
    # checks do.
    payload = (
        e.get("frames"),
        e.get("input_sizes"),
        e.get("output_sizes"),
        e.get("input_dtypes"),
        e.get("output_dtypes"),
    )
    shared = walk.shared
    if shared is not None:
        try:  # noqa: SIM105  (a `with suppress` costs more than the lookup, per entry)
            payload = shared.setdefault(marshal.dumps(payload), payload)
        except ValueError:  # nested too deeply to serialise: kept as it is
            pass
    x.frames, x.in_sizes, x.out_sizes, x.in_dtypes, x.out_dtypes = payload
    x.walk = walk
    return x


def _check_payload(e: _Entry) -> None:
    """Check an entry's sizes and dtypes (normalised: a dtype written as one name becomes a
    list); raises `_Bad`."""
    e.in_sizes = _sizes(e.in_sizes, "input_sizes", e.walk)
    e.out_sizes = _sizes(e.out_sizes, "output_sizes", e.walk)
    e.in_dtypes = _dtypes(e.in_dtypes, "input_dtypes", e.walk)
    e.out_dtypes = _dtypes(e.out_dtypes, "output_dtypes", e.walk)


def _checked_dump(
    data: Any,
    where: str | None,
    share: bool = True,
    reread: Any = None,
    payloads: dict[bytes, tuple] | None = None,
) -> tuple[_Columns, dict[str, tuple[str, tuple[int, ...] | None]], str]:
    """(entries as `_Columns` in record_id order, pg name → (description, ranks or None),
    version). `share`: the frames kept for entries that are not `completed` are shared between
    entries that hold equal ones (`_kept_frames`). `reread`: returns the dump's entries again,
    for the frames of `completed` entries, which are not kept (None: `data` itself stays
    referenced and is read instead; a reader of files passes `_reader`, so the unpickled dump
    can be freed). `payloads`: equal sizes and dtypes are one tuple across the dumps read with
    it. With `reread`, entries that leave out optional fields get them filled in."""
    if not isinstance(data, dict):
        raise CommlintInputError(
            f"not a Flight Recorder dump: the top level is {_kind(data)}", where
        )
    budget = data.get("_budget") if isinstance(data.get("_budget"), int) else None
    entries = data.get("entries", [])
    if not isinstance(entries, (list, tuple)):
        raise CommlintInputError(f"'entries' is {_kind(entries)}, not a list of entries", where)
    walk = _Walk(budget)
    cols = _fast_columns(entries, walk, {} if payloads is None else payloads, reread is not None)
    if cols is None:  # some entry is not plain: entry by entry, to say which and what
        walk = _Walk(budget)
        cols = _columns_of(_slow_entries(entries, walk, where), walk)
    else:
        cols.reread = reread if reread is not None else lambda: entries
        cols.frames = _kept_frames(entries, cols, share)
    walk.shared = None
    try:
        config = _pg_config(data.get("pg_config"), walk)
    except _Bad as exc:
        raise CommlintInputError(f"pg_config: {exc}", where) from None
    version = data.get("version", "?")
    if version.__class__ not in (str, int, float):  # (bool is not a version either)
        raise CommlintInputError(
            f"'version' is {_kind(version)}, not a version string: not a Flight Recorder dump",
            where,
        )
    return cols, config, version


def _slow_entries(entries: list | tuple, walk: _Walk, where: str | None) -> list[_Entry]:
    """Every entry checked on its own (sizes and dtypes too), in record_id order; raises a
    located error for the first that is not what Flight Recorder writes."""
    out = []
    for i, e in enumerate(entries):
        try:
            x = _check_entry(i, e, walk)
            _check_payload(x)
        except _Bad as exc:
            raise CommlintInputError(f"entry {i}: {exc}", where) from None
        out.append(x)
    out.sort(key=attrgetter("record_id"))
    return out


class _Columns:
    """One rank's checked entries, field by field, in record_id order.

    A job holds millions of entries and uses few of them one by one (the ones kept in the
    trace, compared or located): those become `_Entry` objects on demand (`entry`). Frames
    are kept for the entries that are not `completed` (`_kept_frames`); the others' frames are
    read again from the dump when a site is needed (`fetch`), so a big job does not hold
    millions of frame dicts."""

    __slots__ = (
        "cache",
        "desc",
        "frames",
        "group",
        "index",
        "p2p",
        "p2p_seq",
        "payload",
        "pg",
        "raw",
        "record_id",
        "reread",
        "seq",
        "split",
        "state",
        "walk",
    )

    def __len__(self) -> int:
        return len(self.pg)

    def entry(self, i: int) -> _Entry:
        e = self.cache.get(i)
        if e is None:
            e = self.cache[i] = _Entry()
            e.cols, e.pos, e.index, e.record_id = self, i, self.index[i], self.record_id[i]
            e.pg, e.desc, e.seq, e.p2p_seq = self.pg[i], self.desc[i], self.seq[i], self.p2p_seq[i]
            e.backend, e.raw, e.detail = self.split[i]
            e.state, e.p2p = self.state[i], self.p2p[i]
            _, e.in_sizes, e.out_sizes, e.in_dtypes, e.out_dtypes = self.payload[i]
            e.walk = self.walk
            e.frames = self.frames.get(i, _MISSING)
            e.group = self.group[i] if self.group is not None else None
        return e

    def fetch(self, positions: Iterable[int]) -> None:
        """Read again (once) the frames of these entries that were not kept; raises `_Bad`."""
        need = [i for i in positions if i not in self.frames]
        if not need:
            return
        if self.reread is None:
            raise _Bad("its frames are no longer available")
        entries = self.reread()
        for i in need:
            raw = entries[self.index[i]] if self.index[i] < len(entries) else None
            if type(raw) is not dict:
                raise _Bad("the dump changed while it was being read")
            frames = self.frames[i] = raw.get("frames")
            e = self.cache.get(i)
            if e is not None and e.frames is _MISSING:
                e.frames = frames


_MISSING: Any = object()  # an entry's frames, not kept: `_Columns.fetch` reads them again

_FIELDS = itemgetter(
    "profiling_name",
    "process_group",
    "collective_seq_id",
    "record_id",
    "p2p_seq_id",
    "state",
    "is_p2p",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
)
_P2P_OPS = frozenset(("send", "recv"))
_LISTS = {list, tuple}


def _exact_payload(p: tuple, walk: _Walk) -> None:
    """Sizes and dtypes exactly as NCCL and gloo write them (lists of lists of integers,
    lists of names), else `_Bad`: the entry-by-entry path then says which entry and what."""
    for sizes in p[1:3]:
        _sizes(sizes, "", walk)
    for dtypes in p[3:]:
        if type(dtypes) is str:
            raise _Bad("a dtype written as one name")
        _dtypes(dtypes, "", walk)


def _types(column: Iterable[Any]) -> set[type]:
    return set(map(type, column))


def _fill_optional(entries: list | tuple) -> bool:
    """Add the optional fields an entry leaves out (older torch versions, torch's own tests),
    as the entry-by-entry check reads them; False when a required one is missing."""
    for i, e in enumerate(entries):
        if len(e) >= len(_OPTIONAL) + 3 and all(map(e.__contains__, _OPTIONAL)):
            continue
        if "profiling_name" not in e or "process_group" not in e or "collective_seq_id" not in e:
            return False
        for key, value in _OPTIONAL.items():
            if e.get(key) is None:
                e[key] = i if key == "record_id" else value
    return True


_OPTIONAL: dict[str, Any] = {
    "record_id": None,  # the entry's position
    "p2p_seq_id": 0,
    "state": "",
    "is_p2p": False,
    "input_sizes": [],
    "output_sizes": [],
    "input_dtypes": [],
    "output_dtypes": [],
}


def _fast_columns(
    entries: list | tuple, walk: _Walk, payloads: dict[bytes, tuple], mutable: bool
) -> _Columns | None:
    """Columns of a dump whose entries are all plain (every key present, each field of the
    type NCCL and gloo write), checked a field at a time over all entries; None otherwise."""
    if not entries:
        return None
    try:
        rows = list(map(_FIELDS, entries))
    except TypeError:  # an entry that is not a dict
        return None
    except KeyError:
        if not mutable or _types(entries) != {dict} or not _fill_optional(entries):
            return None
        rows = list(map(_FIELDS, entries))
    prof, pgs, seqs, rids, p2p_seqs, states, is_p2p, ins, outs, in_dt, out_dt = zip(
        *rows, strict=True
    )
    del rows
    if _types(prof) != {str} or _types(states) != {str} or not _types(is_p2p) <= {bool}:
        return None
    if _types(seqs) != {int} or _types(rids) != {int} or _types(p2p_seqs) != {int}:
        return None
    if not _types(pgs) <= {tuple, list} or set(map(len, pgs)) != {2}:
        return None
    names, descs = list(map(itemgetter(0), pgs)), list(map(itemgetter(1), pgs))
    if _types(names) != {str} or _types(descs) != {str}:
        return None
    if not _types(ins) <= _LISTS or not _types(outs) <= _LISTS:
        return None
    if not _types(in_dt) <= _LISTS or not _types(out_dt) <= _LISTS:
        return None
    cols = _Columns()
    n = len(entries)
    order: Any = range(n)
    permuted = n > 1 and not all(map(lt, rids, islice(rids, 1, None)))
    if permuted:
        order = sorted(order, key=rids.__getitem__)  # stable, as the entry-by-entry path

    def column(values: Any) -> Any:
        return list(map(values.__getitem__, order)) if permuted else values

    cols.index = order
    cols.record_id = column(rids)
    cols.pg, cols.desc = column(names), column(descs)
    cols.seq, cols.p2p_seq, cols.state = column(seqs), column(p2p_seqs), column(states)
    cols.split = list(map(_split_profiling_name, column(prof)))
    cols.raw = list(map(itemgetter(1), cols.split))
    if not any(is_p2p) and _P2P_OPS.isdisjoint(cols.raw):
        cols.p2p = [False] * n
    else:
        cols.p2p = [p or r in _P2P_OPS for p, r in zip(column(is_p2p), cols.raw, strict=True)]
    # Equal sizes and dtypes are one tuple: a rank repeats a few shapes thousands of times.
    # An entry's are compared with the last ones of its group; those that differ are checked
    # (`_exact_payload`), then shared by value across the dumps. Compared with `==`, a dimension
    # written `1.0` or `true` next to an earlier `1` of its group reads as that `1`.
    payload = list(
        zip(cols.raw, column(ins), column(outs), column(in_dt), column(out_dt), strict=True)
    )
    last: dict[str, tuple] = {}
    try:
        for i, (pg, p) in enumerate(zip(cols.pg, payload, strict=True)):
            q = last.get(pg)
            if q is not None and q == p:
                payload[i] = q
                continue
            _exact_payload(p, walk)
            try:
                q = payloads.setdefault(marshal.dumps(p), p)
            except ValueError:  # nested too deeply to serialise: kept as it is
                q = p
            last[pg] = payload[i] = q
    except _Bad:
        return None
    cols.payload = payload
    cols.cache, cols.group, cols.walk = {}, None, walk
    return cols


def _kept_frames(entries: list | tuple, cols: _Columns, share: bool) -> dict[int, Any]:
    """The frames of the entries that are not `completed`: the ones a trace keeps, mostly.
    With `share`, equal frames are one object (a stuck job of gloo dumps keeps every entry,
    and the frames' dicts were 60% of the memory of a 16M-entry job); `marshal` tells 1,
    1.0 and True apart, as the frames' check does."""
    out: dict[int, Any] = {}
    shared: dict[bytes, Any] = {}
    index = cols.index
    for i, state in enumerate(cols.state):
        if state == "completed":
            continue
        frames = entries[index[i]].get("frames")
        if share:
            try:  # noqa: SIM105  (a `with suppress` costs more than the lookup, per entry)
                frames = shared.setdefault(marshal.dumps(frames), frames)
            except ValueError:  # nested too deeply to serialise: kept as it is
                pass
        out[i] = frames
    return out


def _columns_of(entries: list[_Entry], walk: _Walk) -> _Columns:
    """Columns over entries checked one by one (every entry's frames kept)."""
    cols = _Columns()
    cols.cache = dict(enumerate(entries))
    for i, e in enumerate(entries):
        e.cols, e.pos = cols, i
    cols.index = [e.index for e in entries]
    cols.record_id = [e.record_id for e in entries]
    cols.pg, cols.desc = [e.pg for e in entries], [e.desc for e in entries]
    cols.seq, cols.p2p_seq = [e.seq for e in entries], [e.p2p_seq for e in entries]
    cols.state, cols.p2p = [e.state for e in entries], [e.p2p for e in entries]
    cols.split = [(e.backend, e.raw, e.detail) for e in entries]
    cols.raw = [e.raw for e in entries]
    cols.payload = [(e.raw, e.in_sizes, e.out_sizes, e.in_dtypes, e.out_dtypes) for e in entries]
    cols.frames = {i: e.frames for i, e in enumerate(entries)}
    cols.group, cols.reread, cols.walk = None, None, walk
    return cols


def _pg_config(value: Any, walk: _Walk) -> dict[str, tuple[str, tuple[int, ...] | None]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"is {_kind(value)}, not a dict")
    walk.spend(len(value))
    out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    for name, cfg in value.items():
        if not isinstance(name, (str, int)) or isinstance(name, bool):
            raise _Bad(f"has a key that is {_kind(name)}, not a group name")
        if not isinstance(cfg, dict):
            raise _Bad(f"group '{name}' is {_kind(cfg)}, not a dict")
        if str(name) == "":
            continue  # gloo's placeholder `{'': {'ranks': '[]'}}`
        desc = cfg.get("desc")
        if desc is not None and not isinstance(desc, str):
            raise _Bad(f"group '{name}': 'desc' is {_kind(desc)}, not a string")
        ranks = _parse_ranks(cfg.get("ranks"), str(name), walk)
        out[str(name)] = (desc or "", ranks or None)
    return out


def _parse_ranks(value: Any, name: str, walk: _Walk) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        walk.spend(len(value))
        parsed = _parse_rank_string(value)
        if parsed is None:
            raise _Bad(f"group '{name}': 'ranks' is not a list of ranks")
        return parsed
    if isinstance(value, (list, tuple)):
        walk.spend(len(value))
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in value):
            raise _Bad(f"group '{name}': 'ranks' holds something other than integers")
        return _valid_ranks(tuple(value), name)
    raise _Bad(f"group '{name}': 'ranks' is {_kind(value)}, not a list")


def _valid_ranks(ranks: tuple[int, ...], name: str) -> tuple[int, ...]:
    if any(not 0 <= r < _MAX_RANK for r in ranks):
        raise _Bad(f"group '{name}': a rank is out of range")
    if len(set(ranks)) != len(ranks):
        raise _Bad(f"group '{name}': a rank is listed twice")
    return tuple(sorted(ranks))


@lru_cache(maxsize=1024)
def _parse_rank_string(text: str) -> tuple[int, ...] | None:
    """`pg_config` ranks are a string such as `"[0, 1]"` (JSON; Python syntax as a fallback)."""
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            return None
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return None
    try:
        return _valid_ranks(tuple(value), "")
    except _Bad:
        return None


@lru_cache(maxsize=8192)
def _split_profiling_name(profiling: str) -> tuple[str, str, str | None]:
    """(backend, raw op name, p2p detail such as `0->1`) from `profiling_name`."""
    backend, _, rest = profiling.partition(":")
    if not rest:
        backend, rest = "", profiling
    parts = rest.split(" ", 1)
    return backend, parts[0], parts[1] if len(parts) > 1 else None


def user_frame(frames: list[dict[str, Any]] | None) -> tuple[str | None, list[str]]:
    """The innermost frame outside torch and the standard library, and the frames around it."""
    frames = frames or []
    for i, f in enumerate(frames):
        filename = str(f.get("filename") or "")
        if filename and not _internal(filename):
            rest = [
                _frame_text(g)
                for g in frames[i + 1 :]
                if not _internal(str(g.get("filename") or ""))
            ]
            return f"{filename}:{f.get('line')}", rest[:8]
    return None, [_frame_text(f) for f in frames[:8]]


def _frame_text(f: dict[str, Any]) -> str:
    return f"{f.get('filename')}:{f.get('line')} in {f.get('name')}"


@lru_cache(maxsize=4096)
def _internal(filename: str) -> bool:
    return bool(_INTERNAL.search(filename))


def _site(e: _Entry) -> tuple[str | None, list[str]]:
    """The entry's user frame and stack; its `frames` are checked here, once (raises `_Bad`)."""
    if e.frames is _MISSING:
        e.cols.fetch((e.pos,))
    if e.frames is not None and not isinstance(e.frames, _CheckedFrames):
        e.frames = _CheckedFrames(_frames(e.frames, e.walk))
    return user_frame(e.frames)


class _CheckedFrames(list):
    """Frames that passed `_frames`."""


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
