"""Flight Recorder dumps → `Trace`: explain a hang after the fact with the same checker.

PyTorch's Flight Recorder keeps, per rank, a ring buffer of the collectives and p2p ops it
scheduled, and dumps it on a watchdog timeout (one pickle per rank, `<prefix><rank>`; or JSON
from `_dump_fr_trace_json`). This reader aligns the dumps the way the job ran them:

- every dump is checked field by field before it is used (a located error names the file and
  the entry); pickles are read by an unpickler that loads no class and so runs no code, and
  the walk over a dump has a budget proportional to its size (shared references cannot make a
  small file cost unbounded work);
- process-group membership comes only from what the dumps say (each rank's own `pg_config`,
  so one group name may stand for different ranks on different ranks) or from `groups=`;
  a group whose members nobody states is an input error naming it, never a guess;
- entries are read in `record_id` order (the rank's issue order, across every process group);
- collectives meet by process group and `collective_seq_id` (the per-group sequence the
  checker also matches by); p2p ops by channel, in order (`p2p_seq_id` only groups a batch);
- entries older than the oldest one every member still holds are dropped (ring-buffer
  eviction); a prefix of entries that are `completed` on every member is done and dropped too
  (`keep_completed=True` keeps them) — after their sizes and dtypes were compared: a completed
  collective whose ranks disagree corrupted data silently (`dump_findings`);
- every rank with a dump ends where its dump ends: the rank was alive but issued nothing more,
  so a peer waiting for it is a *missing rank* (CL202), not a rank that finished;
- each action's `site` is the innermost frame of the user's code (not torch, not the standard
  library); `label` carries the group's sequence id (Flight Recorder's numbering) and state.

Sizes and dtypes of actions come from `input_sizes` / `input_dtypes`; outputs and all_to_all
totals are compared here (`dump_findings`). Flight Recorder does not record the root of rooted
collectives: the reader uses the group's first rank and says so in the label.
"""

from __future__ import annotations

import ast
import gc
import io
import json
import marshal
import pickle
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from itertools import compress, count, islice, repeat
from operator import and_, attrgetter, eq, ge, gt, itemgetter, lt, ne, not_, truth
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from commlint.findings import CommlintInputError, Finding, Location
from commlint.plans.gate import memory_budget, numbers_located, read_input, read_text
from commlint.plans.importers.common import validated
from commlint.trace import WORLD, Action, RankEnd, Trace

DUMP_SUFFIXES = ("", ".json", ".pkl", ".pickle")
_RANK_RE = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.(?:json|pkl|pickle))?$")

# profiling_name → trace op; names from torch/distributed/flight_recorder/components/types.py.
OP_NAMES = {
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "reduce": "reduce",
    "_reduce_oop": "reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "all_gather_single": "all_gather",
    "all_gather_v": "all_gather",
    "_all_gather_base": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "all_reduce_barrier": "barrier",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_v": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_all_single": "all_to_all",
    "all_to_all_v_single": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
}
# Entries that mark the end of a coalesced batch, or set-up steps with no peer to wait for.
MARKERS = {"coalesced", "split", "new_window"}

DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
}

# Frames that are not the user's: torch itself and the Python standard library.
_INTERNAL = re.compile(
    r"(/site-packages/torch/|/dist-packages/torch/|^<|/lib/python3\.\d+/(?!site-packages/|dist-packages/)"
    r"|/torch/(distributed|nn/parallel|_dynamo|utils|autograd|multiprocessing)/)"
)


# Keys that name the default group in `groups=`, besides its pg name and description.
WORLD_KEYS = (WORLD, "default_pg")
# A dump may hold this many list items and frames per byte of file before the walk stops:
# far above any real dump (a few per byte), far below what shared references can fake.
NODES_PER_BYTE = 16
# Memory an unpickled dump may take: real dumps take under 20 bytes per byte of pickle.
PICKLE_BYTES_PER_BYTE = 64
PICKLE_SLACK = 256 << 20
_MAX_RANK = 1 << 20  # as the trace format (trace.MAX_WORLD_SIZE)
# Entries of a job read before the kept frames (of entries that did not complete) start to be
# shared: sharing costs about 2 µs per kept entry and saves about 1.7 kB (frames dicts), which
# matters for gloo dumps, whose entries all stay `scheduled` and are all kept.
SHARE_AFTER = 1 << 19


class _NoClassesUnpickler(pickle.Unpickler):
    """A dump is plain dicts, lists, tuples, strings and numbers: refuse anything else, so no
    `__reduce__` payload can run (torch's fr_trace uses `pickle.load`, which runs it)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dump")


def read_dump(path: str | Path) -> dict[str, Any]:
    """One rank's dump, pickle or JSON (sniffed from the content, not the name).

    The dict gets a `_budget` key: how many list items its checks may walk."""
    name = str(path)
    raw = read_input(path, what="a dump")
    if not raw:
        raise CommlintInputError("empty file: a dump cut short, not a Flight Recorder dump", name)
    if raw.lstrip()[:1] in (b"{", b"["):
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CommlintInputError(f"invalid Flight Recorder JSON dump: {exc}", name) from None
        except RecursionError:
            raise CommlintInputError(
                "invalid Flight Recorder JSON dump: nested too deeply to read", name
            ) from None
    else:
        try:
            # a memo index is a request for memory (the C unpickler sizes its memo by it):
            # a 9-byte pickle could ask for gigabytes; a real dump needs a few times its size
            with memory_budget(PICKLE_BYTES_PER_BYTE * len(raw) + PICKLE_SLACK):
                data = _NoClassesUnpickler(io.BytesIO(raw)).load()
        except MemoryError:
            raise CommlintInputError(
                f"not a Flight Recorder dump: unpickling it asks for more than "
                f"{PICKLE_BYTES_PER_BYTE} times its size in memory (a memo index far beyond "
                "its contents)",
                name,
            ) from None
        except Exception as exc:
            raise CommlintInputError(
                f"not a Flight Recorder dump (pickle or JSON): {_short(exc)}", name
            ) from None
    if not isinstance(data, dict):
        raise CommlintInputError(
            f"not a Flight Recorder dump: the top level is {_kind(data)}, not a dict",
            name,
        )
    data["_budget"] = 100_000 + NODES_PER_BYTE * len(raw)
    return data


def _kind(value: Any) -> str:
    """`an integer`, `a list`…: what a field holds, never its text (which may be huge)."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", tuple: "a list", dict: "a dict", bytes: "bytes"}  # fmt: skip
    return names.get(type(value), f"a {type(value).__name__}")


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"


def dump_rank(path: str | Path) -> int | None:
    """The rank a dump file is for, from the digits that end its name (`nccl_trace_rank_3`)."""
    m = _RANK_RE.match(Path(path).name)
    return int(m.group("rank")) if m else None


def looks_like_dump(path: str | Path) -> bool:
    """Cheap sniff: a pickle protocol header or JSON with Flight Recorder keys."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if head[:1] == b"\x80":
        return b"entries" in head or b"pg_config" in head or b"version" in head
    return head.lstrip()[:1] == b"{" and (b'"pg_config"' in head or b'"entries"' in head)


def dump_files(folder: str | Path, prefix: str | None = None) -> dict[int, Path]:
    """Rank → dump file in a folder; files whose name does not end in a rank are skipped."""
    out: dict[int, Path] = {}
    root = Path(folder)
    named: list[tuple[Path, re.Match]] = []
    for f in sorted(root.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        if prefix is not None and not f.name.startswith(prefix):
            continue
        m = _RANK_RE.match(f.name)
        if m:
            named.append((f, m))
    looks = {f for f, _ in named if looks_like_dump(f)}
    # a file named like the dumps beside it is one of them even when its content no longer
    # looks like a dump (empty, cut short): read, it is a located error for its rank, where
    # skipped its rank would be reported as one that wrote no dump
    family = {(m.group("prefix"), Path(f.name).suffix) for f, m in named if f in looks}
    for f, m in named:
        if f not in looks and (m.group("prefix"), Path(f.name).suffix) not in family:
            continue
        rank = int(m.group("rank"))
        if rank in out:
            raise CommlintInputError(
                f"two dumps for rank {rank}: {out[rank].name} and {f.name} "
                "(keep one format per folder, or pass a prefix)",
                str(root),
            )
        out[rank] = f
    return out


def load_flight_recorder(
    path: str | Path,
    *,
    groups: Mapping[str, Iterable[int]] | None = None,
    world_size: int | None = None,
    prefix: str | None = None,
    keep_completed: bool = False,
) -> Trace:
    """Read a folder of per-rank Flight Recorder dumps (or one dump file) into a `Trace`.

    `groups` maps a process group's name or description (`WORLD` or `default_pg` for the
    default group) to its global ranks, for dumps that do not say (gloo leaves `pg_config`
    empty). `world_size` gives the default group's size. Raises a located
    `CommlintInputError` for a malformed dump or a group whose members are not known."""
    root = Path(path)
    if root.is_dir():
        files = dump_files(root, prefix)
        if not files:
            raise CommlintInputError(
                "no Flight Recorder dumps in this folder (expected files named <prefix><rank>)",
                str(root),
            )
    elif root.is_file():
        rank = dump_rank(root)
        files = {rank if rank is not None else 0: root}
    else:
        raise CommlintInputError("no such file or directory", str(root))
    collecting = gc.isenabled()
    gc.disable()  # millions of small dicts: the cyclic collector would rescan them repeatedly
    try:
        # one raw dump at a time: only what the checked entries keep stays in memory; past
        # SHARE_AFTER entries, equal kept frames are shared (see `_kept_frames`)
        checked = {}
        seen = 0
        payloads: dict[bytes, tuple] = {}
        for rank, f in files.items():
            try:
                data = read_dump(f)
            except CommlintInputError as exc:  # a truncated or unreadable dump is not "no dump"
                if len(files) > 1:
                    exc.error.message = f"rank {rank}: {exc.error.message}"
                raise
            with numbers_located(str(f)):
                checked[rank] = _checked_dump(
                    data,
                    str(f),
                    share=seen >= SHARE_AFTER,
                    reread=_reader(f),
                    payloads=payloads,
                )
            seen += len(checked[rank][0])
        with numbers_located(str(root)):
            return _to_trace(
                checked,
                groups=groups,
                world_size=world_size,
                keep_completed=keep_completed,
                path=str(root),
                files={r: str(f) for r, f in files.items()},
            )
    finally:
        if collecting:
            gc.enable()


def _reader(path: Path) -> Any:
    """The entries of a dump read again (for frames not kept), if the file did not change."""
    try:
        before = path.stat()
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {exc.strerror}", str(path)) from None

    def entries() -> list:
        try:
            now = path.stat()
        except OSError:
            now = None
        if now is None or (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            raise _Bad("the dump changed while it was being read")
        rows = read_dump(path).get("entries")  # (called while the collector is off)
        if not isinstance(rows, (list, tuple)):
            raise _Bad("the dump changed while it was being read")
        return rows

    return entries


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


class _Bad(Exception):
    """A field that is not what Flight Recorder writes; caught and located by the caller."""


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


# --- process groups: only what the dumps (or the user) say ----------------------------------


def _is_default(name: str, desc: str) -> bool:
    """torch names the default group "0" and describes it `default_pg`."""
    return desc == "default_pg" or name == "0"


class _Instance:
    """One process group as the ranks that use it know it: a pg name and its members."""

    __slots__ = ("default", "desc", "members", "name", "trace_name")

    def __init__(self, name: str, desc: str, members: tuple[int, ...], default: bool) -> None:
        self.name, self.desc, self.members, self.default = name, desc, members, default
        self.trace_name = ""


class _Groups:
    """Process groups of the job: (rank, pg name) → the group instance that rank used."""

    def __init__(
        self,
        checked: Mapping[int, tuple[_Columns, dict[str, tuple[str, Any]], Any]],
        given: Mapping[str, Iterable[int]] | None,
        world_size: int | None,
        where: Any,
    ) -> None:
        given_ranks = _given(given)
        default_given = next((given_ranks[k] for k in WORLD_KEYS if k in given_ranks), None)
        configs = {r: c for r, (_, c, _) in checked.items()}
        known_world = world_size
        if known_world is None and default_given is not None:
            known_world = len(default_given)
        if known_world is None:
            for cfg in configs.values():
                for name, (desc, ranks) in cfg.items():
                    if ranks and _is_default(name, desc):
                        known_world = len(ranks)
                        break
        by_name: dict[str, set[tuple[int, ...]]] = {}
        for cfg in configs.values():
            for name, (_, ranks) in cfg.items():
                if ranks:
                    by_name.setdefault(name, set()).add(ranks)
        self.instances: dict[tuple[str, tuple[int, ...]], _Instance] = {}
        self.of: dict[tuple[int, str], _Instance] = {}
        self.by_rank: dict[int, dict[str, _Instance]] = {}
        missing: dict[str, tuple[str, int, int]] = {}  # pg name → (desc, first rank, entry)
        for rank in sorted(checked):
            cols, cfg, _ = checked[rank]
            # each pg name with its first entry (the reversed dict keeps the first position)
            firsts = dict(zip(reversed(cols.pg), range(len(cols) - 1, -1, -1), strict=True))
            seen = {n: cols.index[i] for n, i in sorted(firsts.items(), key=itemgetter(1))}
            for name, first in seen.items():
                desc = cfg.get(name, ("", None))[0] or _desc_of(cols, name)
                default = _is_default(name, desc)
                members = given_ranks.get(name)
                if members is None and desc and desc in given_ranks:
                    members = given_ranks[desc]
                if members is None and default and default_given is not None:
                    members = default_given
                if members is None:
                    members = cfg.get(name, ("", None))[1]
                if members is None and default and known_world is not None:
                    members = tuple(range(known_world))
                if members is None:
                    holding = [s for s in by_name.get(name, ()) if rank in s]
                    members = holding[0] if len(holding) == 1 else None
                if members is None:
                    missing.setdefault(name, (desc, rank, first))
                    continue
                if rank not in members:
                    raise CommlintInputError(
                        f"entry {first}: process group '{name}' has members "
                        f"{_short_list(members)}, which do not include this rank ({rank})",
                        where(rank),
                    )
                key = (name, members)
                inst = self.instances.get(key)
                if inst is None:
                    inst = self.instances[key] = _Instance(name, desc, members, default)
                self.of[(rank, name)] = inst
                self.by_rank.setdefault(rank, {})[name] = inst
        if missing:
            raise _unknown_members(missing, where, bool(given_ranks))
        top = max(
            [*checked, *(m for inst in self.instances.values() for m in inst.members[-1:])],
            default=0,
        )
        self.world_size = known_world or top + 1
        self._name_instances()

    def _name_instances(self) -> None:
        per_desc = Counter(
            i.desc for i in self.instances.values() if i.desc and i.desc != "undefined"
        )
        per_name = Counter(i.name for i in self.instances.values())
        taken: set[str] = {WORLD}
        for inst in sorted(self.instances.values(), key=lambda i: (i.name, i.members)):
            if inst.default and inst.members == tuple(range(self.world_size)):
                inst.trace_name = WORLD
                continue
            desc = inst.desc if inst.desc and inst.desc != "undefined" else ""
            if desc and per_desc[desc] == 1 and desc not in taken:
                name = desc
            elif desc:
                name = f"{desc}:{inst.name}"
            else:
                name = f"pg{inst.name}"
            if per_name[inst.name] > 1:  # one pg name, different members on different ranks
                name += f"@{inst.members[0]}"
            base, k = name, 1
            while name in taken:
                k += 1
                name = f"{base}.{k}"
            taken.add(name)
            inst.trace_name = name

    def trace_groups(self) -> dict[str, list[int]]:
        return {
            i.trace_name: list(i.members) for i in self.instances.values() if i.trace_name != WORLD
        }


def _desc_of(cols: _Columns, name: str) -> str:
    return next((d for pg, d in zip(cols.pg, cols.desc, strict=True) if pg == name and d), "")


def _given(given: Mapping[str, Iterable[int]] | None) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for key, ranks in (given or {}).items():
        try:
            values = tuple(ranks)
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in values):
                raise _Bad(f"group '{key}': members must be integers")
            out[str(key)] = _valid_ranks(values, str(key))
        except TypeError:
            raise CommlintInputError(f"groups: '{key}' is not a list of ranks") from None
        except _Bad as exc:
            raise CommlintInputError(f"groups: {exc}") from None
    return out


def _short_list(ranks: tuple[int, ...]) -> str:
    if len(ranks) <= 8:
        return str(list(ranks))
    return f"[{', '.join(map(str, ranks[:8]))}, … ({len(ranks)} ranks)]"


def _unknown_members(
    missing: dict[str, tuple[str, int, int]], where: Any, had_groups: bool
) -> CommlintInputError:
    parts = []
    first_file = None
    for name, (desc, rank, entry) in missing.items():
        file = where(rank)
        first_file = first_file or file
        about = f"{desc}, " if desc and desc != "undefined" else ""
        of = "" if file == first_file else f" of {Path(str(file)).name}"
        parts.append(f"'{name}' ({about}first used by rank {rank} in entry {entry}{of})")
    example = ", ".join(
        f'"{WORLD if _is_default(n, d) else n}": [...]' for n, (d, _, _) in missing.items()
    )
    return CommlintInputError(
        "process group members are not in the dumps (gloo writes an empty pg_config): "
        f"{', '.join(parts)}; deciding whether the job deadlocked would mean guessing them"
        + (" (the groups given do not name them)" if had_groups else "")
        + f" — pass them with --groups '{{{example}}}' (group name or description, or "
        "WORLD → global ranks)",
        first_file,
    )


# --- alignment ------------------------------------------------------------------------------


def _aligned_entries(
    per_rank: Mapping[int, _Columns], pgs: _Groups, keep_completed: bool
) -> tuple[dict[int, list[int]], dict[int, int], _Collectives]:
    """Per rank, the positions of the entries to check (evicted-on-some-rank and
    done-everywhere ones dropped); and every aligned collective, dropped ones included.

    Works a process group at a time: a rank's entries of one group, in order, are compared
    with the first rank's as whole lists (equal sizes and dtypes are one shared tuple, so
    this is mostly identity checks); entry by entry only where they differ."""
    start: dict[str, int] = {}  # first collective seq every dumped member still holds
    done: dict[str, int] = {}  # last seq completed on every dumped member
    runs = {r: _runs(c) for r, c in per_rank.items()}
    for r, rank_runs in runs.items():
        states = per_rank[r].state
        for g, run in rank_runs.items():
            seqs = run.seqs
            seq = seqs[0]
            # the leading entries that completed: up to the first one that did not
            ended = map(ne, map(states.__getitem__, run.at), repeat("completed"))
            k = next(compress(count(), ended), len(seqs))
            last_done = seqs[k - 1] if k else seq - 1
            start[g] = max(start.get(g, seq), seq)
            done[g] = min(done.get(g, last_done), last_done)
    dropped_p2p: set[tuple[int, int]] = set()
    if not keep_completed:
        _drop_completed_p2p(per_rank, pgs, dropped_p2p)
    colls = _Collectives(per_rank, start, done, keep_completed)
    out: dict[int, list[int]] = {}
    dropped: dict[int, int] = {}
    for r, c in per_rank.items():
        kept: list[int] = []
        for g, run in runs[r].items():
            kept.extend(colls.align(g, run))
        if any(c.p2p):
            for i in compress(range(len(c)), c.p2p):
                if c.raw[i] and (r, i) not in dropped_p2p:
                    kept.append(i)
        kept.sort()
        dropped[r] = len(c) - len(kept)
        out[r] = kept
    return out, dropped, colls


class _Run:
    """One rank's collective entries of one process group, in order: positions, seqs, and
    (raw op, sizes, dtypes) as shared tuples."""

    __slots__ = ("at", "payloads", "seqs")

    def __init__(self, c: _Columns, at: Any) -> None:
        self.at = at
        self.seqs = list(map(c.seq.__getitem__, at))
        self.payloads = list(map(c.payload.__getitem__, at))


def _runs(c: _Columns) -> dict[str, _Run]:
    """A rank's collective entries (not p2p, with an op name), split by process group."""
    n = len(c)
    groups: Any = c.group
    if not any(c.p2p) and all(c.raw):
        at: Any = range(n)
    else:
        at = list(compress(range(n), map(and_, map(not_, c.p2p), map(truth, c.raw))))
        groups = list(map(groups.__getitem__, at))
    if not at:
        return {}
    names = dict.fromkeys(groups)
    if len(names) == 1:
        return {next(iter(names)): _Run(c, at)}
    if len(names) <= 8:
        return {g: _Run(c, list(compress(at, map(eq, groups, repeat(g))))) for g in names}
    split: dict[str, list[int]] = {g: [] for g in names}
    for g, i in zip(groups, at, strict=True):
        split[g].append(i)
    return {g: _Run(c, ps) for g, ps in split.items()}


class _Collectives:
    """Every aligned collective (group, seq): the first entry any rank holds of it, as its
    (raw op, sizes, dtypes) tuple, and whether some rank's entry differs from it."""

    def __init__(
        self,
        per_rank: Mapping[int, _Columns],
        start: dict[str, int],
        done: dict[str, int],
        keep_completed: bool,
    ) -> None:
        self.per_rank, self.start, self.done = per_rank, start, done
        self.keep_completed = keep_completed
        self.differ: set[tuple[str, int]] = set()
        # per group, the first entries' seqs and (raw op, sizes, dtypes) in order (`seqs`,
        # `vals`) while every rank so far agrees with them as a list; past the first
        # disagreement, a dict by seq (`firsts`)
        self.seqs: dict[str, list[int]] = {}
        self.vals: dict[str, list[tuple]] = {}
        self.firsts: dict[str, dict[int, tuple]] = {}

    def finished(self, key: tuple[str, int]) -> bool:
        """Completed on every member that holds it (and so dropped from the trace)."""
        return not self.keep_completed and key[1] <= self.done.get(key[0], -1)

    def align(self, g: str, run: _Run) -> list[int]:
        """Compare one rank's run of group `g` with the first entries; its kept positions."""
        first = self.start[g]
        seqs, payloads, at = run.seqs, run.payloads, run.at
        if seqs[0] < first:  # evicted on some member: not aligned
            inside = list(map(ge, seqs, repeat(first)))
            seqs, payloads, at = (list(compress(x, inside)) for x in (seqs, payloads, at))
            if not seqs:
                return []
        keys, vals = seqs, payloads
        if not MARKERS.isdisjoint(map(itemgetter(0), payloads)):
            compared = [p[0] not in MARKERS for p in payloads]
            keys, vals = list(compress(seqs, compared)), list(compress(payloads, compared))
        if keys:
            self._compare(g, keys, vals)
        if self.keep_completed:
            return at
        last_done = self.done[g]
        return list(compress(at, map(gt, seqs, repeat(last_done))))

    def _compare(self, g: str, keys: list[int], vals: list[tuple]) -> None:
        increasing = all(map(lt, keys, islice(keys, 1, None)))
        ref_seqs = self.seqs.get(g)
        if g not in self.firsts and increasing:
            if ref_seqs is None:
                self.seqs[g], self.vals[g] = list(keys), vals
                return
            m = min(len(keys), len(ref_seqs))
            ref_vals = self.vals[g]
            if keys[:m] == ref_seqs[:m]:
                if vals[:m] != ref_vals[:m]:
                    pairs = zip(keys[:m], vals[:m], ref_vals[:m], strict=True)
                    self.differ.update((g, k) for k, a, b in pairs if a != b)
                if len(keys) > m:  # this rank went further: its entries are the first ones
                    ref_seqs.extend(keys[m:])
                    ref_vals.extend(vals[m:])
                return
        firsts = self.firsts.get(g)
        if firsts is None:  # from here on, entry by entry
            pairs = zip(reversed(ref_seqs or ()), reversed(self.vals.get(g, ())), strict=True)
            firsts = self.firsts[g] = dict(pairs)
            self.seqs.pop(g, None)
            self.vals.pop(g, None)
        previous = None
        for key, val in zip(keys, vals, strict=True):
            f = firsts.get(key)
            if f is None:
                firsts[key] = val
            elif key == previous or val != f:  # the same seq twice in a row: coalesced
                self.differ.add((g, key))
            previous = key

    def first_items(self) -> Iterator[tuple[tuple[str, int], tuple]]:
        """((group, seq), (raw op, payload)) of every aligned collective."""
        for g, seqs in self.seqs.items():
            for seq, val in zip(seqs, self.vals[g], strict=True):
                yield (g, seq), val
        for g, firsts in self.firsts.items():
            for seq, val in firsts.items():
                yield (g, seq), val

    def by_rank(self, keys: set[tuple[str, int]]) -> dict[tuple[str, int], dict[int, list]]:
        """(group, seq) → rank → its entries, for `keys` only."""
        out: dict[tuple[str, int], dict[int, list[_Entry]]] = {}
        start = self.start
        for r, c in self.per_rank.items():
            for i, (g, seq, raw, p2p) in enumerate(zip(c.group, c.seq, c.raw, c.p2p, strict=True)):
                if p2p or not raw or raw in MARKERS:
                    continue
                key = (g, seq)
                if key in keys and seq >= start.get(g, 0):
                    out.setdefault(key, {}).setdefault(r, []).append(c.entry(i))
        return out


def _drop_completed_p2p(
    per_rank: Mapping[int, _Columns], pgs: _Groups, dropped: set[tuple[int, int]]
) -> None:
    """Per channel, the leading send/recv pairs completed on both sides are done."""
    sends: dict[tuple[str, int, int], list[tuple[int, _Entry]]] = {}
    recvs: dict[tuple[str, int, int], list[tuple[int, _Entry]]] = {}
    for r, c in per_rank.items():
        for i in compress(range(len(c)), c.p2p):
            e = c.entry(i)
            if e.raw not in ("send", "recv"):
                continue
            peer = _p2p_peer(e, pgs.of[(r, e.pg)].members)
            if peer is None:
                continue
            if e.raw == "send":
                sends.setdefault((e.group, r, peer), []).append((r, e))
            else:
                recvs.setdefault((e.group, peer, r), []).append((r, e))
    for chan, ss in sends.items():
        rs = recvs.get(chan, [])
        k = 0
        while (
            k < len(ss)
            and k < len(rs)
            and ss[k][1].state == "completed"
            and rs[k][1].state == "completed"
        ):
            dropped.add((ss[k][0], ss[k][1].pos))
            dropped.add((rs[k][0], rs[k][1].pos))
            k += 1


def _p2p_peer(e: _Entry, pg_ranks: tuple[int, ...]) -> int | None:
    """Global peer of a `send a->b` / `recv a<-b` entry (group-local ranks in the name)."""
    if not e.detail:
        return None
    sep = "->" if e.raw == "send" else "<-"
    if sep not in e.detail:
        return None
    text = e.detail.split(sep)[1].strip()
    if not text.isdigit() or len(text) > 9:
        return None
    local_peer = int(text)
    if not 0 <= local_peer < len(pg_ranks):
        return None
    return pg_ranks[local_peer]


# --- sizes and dtypes the checker cannot see --------------------------------------------------

# fr_trace's exemptions: an all_to_all's sizes differ by design, a gather's output and a
# scatter's input exist on the root only.
_NO_INPUT_COMPARE = {"all_to_all", "scatter"}
_NO_OUTPUT_COMPARE = {"all_to_all", "gather"}


def _total(shapes: list[list[int]]) -> int:
    return sum(_numel(s) for s in shapes)


def _by_value(values: dict[int, Any], sites: dict[int, str | None]) -> str:
    groups: dict[str, list[int]] = {}
    for r, v in values.items():
        groups.setdefault(str(v), []).append(r)
    parts = []
    for text, ranks in groups.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_short_list(tuple(ranks))}"
        site = sites.get(ranks[0])
        parts.append(f"{text} on {who}" + (f" @{site}" if site and len(ranks) <= 4 else ""))
    return ", ".join(parts)


def _consistent(op: str, in_sizes: list, out_sizes: list, k: int) -> bool:
    """One rank's entry adds up on its own (output from input and the group size)."""
    if not in_sizes or not out_sizes:
        return op != "all_to_all" or not (in_sizes or out_sizes)
    n_in, n_out = _total(in_sizes), _total(out_sizes)
    if op == "all_reduce":
        return in_sizes == out_sizes
    if op == "all_gather":
        return n_out == n_in * k
    if op == "reduce_scatter":
        return n_in == n_out * k
    if op == "all_to_all":
        return n_in == n_out
    return True


def _payload_problems(
    op: str,
    per: dict[int, list[_Entry]],
    members: tuple[int, ...],
    finished: bool,
    located: _Located,
) -> list[str]:
    """What disagrees in one aligned collective; input sizes and dtypes only when the entry
    was dropped as done (otherwise the checker compares them)."""
    sites = {r: located.site(r, es[0])[0] for r, es in per.items()}
    ins = {r: [list(s) for e in es for s in e.in_sizes] for r, es in per.items()}
    outs = {r: [list(s) for e in es for s in e.out_sizes] for r, es in per.items()}
    in_dt = {r: sorted({_dtype(d) for e in es for d in e.in_dtypes}) for r, es in per.items()}
    out_dt = {r: sorted({_dtype(d) for e in es for d in e.out_dtypes}) for r, es in per.items()}
    problems: list[str] = []
    inputs_differ = op not in _NO_INPUT_COMPARE and len({str(v) for v in ins.values()}) > 1
    in_dtypes_differ = len({str(v) for v in in_dt.values() if v}) > 1
    if finished and inputs_differ:
        problems.append(f"input sizes {_by_value(ins, sites)}")
    if finished and in_dtypes_differ:
        problems.append(f"input dtypes {_by_value(in_dt, sites)}")
    if not inputs_differ and op not in _NO_OUTPUT_COMPARE:
        present = {r: v for r, v in outs.items() if v and v != [[]]}
        if len({str(v) for v in present.values()}) > 1:
            problems.append(f"output sizes {_by_value(present, sites)}")
    if not in_dtypes_differ:
        present_dt = {r: v for r, v in out_dt.items() if v}
        if len({str(v) for v in present_dt.values()}) > 1:
            problems.append(f"output dtypes {_by_value(present_dt, sites)}")
    k = len(members)
    for r in per:
        n_in, n_out = _total(ins[r]), _total(outs[r])
        if not ins[r] or not outs[r]:
            continue
        if op == "all_reduce" and ins[r] != outs[r]:
            problems.append(f"rank {r} reduces input {ins[r]} into output {outs[r]}")
        elif op == "all_gather" and n_out != n_in * k:
            problems.append(
                f"rank {r} gathers {n_in} elements from each of {k} ranks into an output of {n_out}"
            )
        elif op == "reduce_scatter" and n_in != n_out * k:
            problems.append(
                f"rank {r} scatters an input of {n_in} elements into {k} outputs of {n_out}"
            )
    if op == "all_to_all" and set(per) == set(members):
        sent = sum(_total(v) for v in ins.values())
        received = sum(_total(v) for v in outs.values())
        if sent != received and all(outs.values()):
            problems.append(
                f"the ranks send {sent} elements in total but expect to receive {received}"
            )
    return problems


def _dtype(name: str) -> str:
    return DTYPES.get(name, name.lower())


class _Located:
    """Where entries went: (rank, id(entry)) → action index, and each rank's dump file."""

    def __init__(self, where: Any) -> None:
        self.where = where
        self.action: dict[tuple[int, int], int] = {}

    def site(self, rank: int, e: _Entry) -> tuple[str | None, list[str]]:
        try:
            return _site(e)
        except _Bad as exc:
            raise CommlintInputError(f"entry {e.index}: {exc}", self.where(rank)) from None


def _payload_findings(
    colls: _Collectives, members_of: dict[str, tuple[int, ...]], located: _Located
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    suspect = set(colls.differ)
    adds_up: dict[tuple[str, int, int], bool] = {}  # (op, payload, group size): payloads shared
    for key, payload in colls.first_items():
        raw = payload[0]
        if key in suspect:
            continue
        op = OP_NAMES.get(raw)
        if op is None:
            continue
        k = len(members_of.get(key[0], ()))
        ok = adds_up.get((op, id(payload), k))
        if ok is None:
            ok = adds_up[(op, id(payload), k)] = _consistent(op, payload[1], payload[2], k)
        if not ok:
            suspect.add(key)  # every rank agrees with this entry, which does not add up
    if not suspect:
        return out
    table = colls.by_rank(suspect)
    firsts: dict[int, list[_Entry]] = {}
    for per in table.values():
        for r, es in per.items():
            firsts.setdefault(r, []).append(es[0])
    for r, es in firsts.items():  # the frames of the entries named: each dump read once
        try:
            es[0].cols.fetch(e.pos for e in es)
        except _Bad as exc:
            raise CommlintInputError(f"entry {es[0].index}: {exc}", located.where(r)) from None
    for (group, seq), per in sorted(table.items()):
        op = OP_NAMES.get(next(iter(per.values()))[0].raw)
        if op is None or op == "barrier":
            continue
        if len({OP_NAMES.get(es[0].raw) for es in per.values()}) != 1:
            continue  # different collectives: the checker's CL203
        done = colls.finished((group, seq))
        problems = _payload_problems(op, per, members_of.get(group, ()), done, located)
        if not problems:
            continue
        if done:
            effect = (
                "It completed on every rank, so nothing hung: the data is silently wrong "
                "(the ranks combined buffers that do not fit together)."
            )
        else:
            effect = "NCCL hangs or writes past a buffer; gloo fails or corrupts data."
        message = f"{op} #{seq} on group '{group}' disagrees: {'; '.join(problems)}. {effect}"
        locations = []
        for r in sorted(per):
            e = per[r][0]
            locations.append(
                Location(
                    rank=r,
                    action=located.action.get((r, id(e))),
                    site=located.site(r, e)[0],
                    message=f"Flight Recorder entry {e.index} ({e.state or 'no state'})",
                ).model_dump(exclude_none=True)
            )
        from commlint.rules import all_rules  # only with something to report: it loads every rule

        rule = all_rules()["CL204"]
        out.append(
            Finding(
                code=rule.code,
                name=rule.name,
                severity=rule.severity,
                message=message,
                ranks=sorted(per),
                actions=[Location(**loc) for loc in locations],
                fix="Give every rank buffers of the same shape and dtype for this call (inputs "
                "and outputs; for all_to_all, what the ranks send in total must equal what they "
                "receive); look for a size computed differently on some rank just before it.",
            ).model_dump(exclude_none=True)
        )
    return out


# --- entries → actions ----------------------------------------------------------------------


class _RankBuilder:
    """One rank's entries → actions: p2p batches become isend/irecv + wait."""

    def __init__(self, rank: int, pgs: _Groups, located: _Located) -> None:
        self.rank, self.pgs, self.located = rank, pgs, located
        self.actions: list[Action] = []
        self.entry_of: array = array("l")
        self.backends: set[str] = set()
        self.unknown: set[str] = set()
        self.stuck: str | None = None
        self.batch_key: tuple[str, int] | None = None
        self.batch_handles: list[str] = []
        self.n_batches = 0
        self.last_coll: tuple[str, int] | None = None
        self.p2p_count: Counter[tuple[str, int]] = Counter()

    def count_p2p(self, entries: list[_Entry]) -> None:
        self.p2p_count = Counter((e.group, e.p2p_seq) for e in entries if e.raw in ("send", "recv"))

    def _append(self, action: Action, e: _Entry | None) -> None:
        if e is not None:
            self.located.action[(self.rank, id(e))] = len(self.actions)
        self.actions.append(action)
        self.entry_of.append(e.index if e is not None else -1)

    def close_batch(self) -> None:
        if self.batch_key is not None and self.batch_handles:
            self._append(Action(op="wait", handles=list(self.batch_handles)), None)
        self.batch_key, self.batch_handles = None, []

    def add(self, e: _Entry) -> None:
        if e.backend:
            self.backends.add(e.backend)
        if e.raw in MARKERS:
            self.close_batch()
            return
        op = OP_NAMES.get(e.raw)
        if op is None:
            self.unknown.add(e.raw)
            return
        group = e.group
        site, stack = self.located.site(self.rank, e)
        shape, dtype = _payload(e)
        common = {"shape": shape, "dtype": dtype, "site": site, "stack": stack or None}
        state = e.state
        if state != "completed" and self.stuck is None:
            self.stuck = f"{op}({group}) {state or 'scheduled'}"
        if op in ("send", "recv"):
            self._add_p2p(e, op, group, state, common)
            return
        self.close_batch()
        if self.last_coll == (group, e.seq) and self.actions and self.actions[-1].group == group:
            _merge(self.actions[-1], shape)  # a coalesced collective: one op per tensor list
            self.located.action[(self.rank, id(e))] = len(self.actions) - 1
            return
        self.last_coll = (group, e.seq)
        root = None
        label = f"{group}#{e.seq} {state}".strip()
        if op in ("broadcast", "reduce", "gather", "scatter"):
            root = self.pgs.of[(self.rank, e.pg)].members[0]
            label += " (root not recorded)"
        self._append(Action(op=op, group=group, root=root, label=label, **common), e)

    def _add_p2p(self, e: _Entry, op: str, group: str, state: str, common: dict) -> None:
        peer = _p2p_peer(e, self.pgs.of[(self.rank, e.pg)].members)
        if peer is None:
            self.unknown.add(f"{e.raw} {e.detail or ''}".strip())
            return
        key = (group, e.p2p_seq)
        label = f"{group} p2p#{e.p2p_seq} {state}".strip()
        if self.p2p_count[key] > 1:  # ops sharing a p2p_seq_id were issued as one batch
            if self.batch_key != key:
                self.close_batch()
                self.batch_key = key
                self.n_batches += 1
            handle = f"b{self.n_batches}.{len(self.batch_handles)}"
            self.batch_handles.append(handle)
            self._append(
                Action(
                    op="isend" if op == "send" else "irecv",
                    group=group,
                    peer=peer,
                    handle=handle,
                    batch=f"b{self.n_batches}",
                    label=label,
                    **common,
                ),
                e,
            )
            return
        self.close_batch()
        self._append(Action(op=op, group=group, peer=peer, label=label, **common), e)


def dumps_to_trace(
    dumps: Mapping[int, dict[str, Any]],
    *,
    groups: Mapping[str, Iterable[int]] | None = None,
    world_size: int | None = None,
    keep_completed: bool = False,
    path: str | None = None,
    files: Mapping[int, str] | None = None,
) -> Trace:
    """Parsed dumps (rank → dump dict) → `Trace`. See the module docstring for the rules."""
    payloads: dict[bytes, tuple] = {}
    checked = {
        rank: _checked_dump(d, (files or {}).get(rank, path), payloads=payloads)
        for rank, d in dumps.items()
    }
    return _to_trace(
        checked,
        groups=groups,
        world_size=world_size,
        keep_completed=keep_completed,
        path=path,
        files=files,
    )


def _to_trace(
    checked: dict[int, tuple[_Columns, dict[str, tuple[str, Any]], Any]],
    *,
    groups: Mapping[str, Iterable[int]] | None,
    world_size: int | None,
    keep_completed: bool,
    path: str | None,
    files: Mapping[int, str] | None,
) -> Trace:
    def where(rank: int) -> str | None:
        return (files or {}).get(rank, path)

    pgs = _Groups(checked, groups, world_size, where)
    per_rank: dict[int, _Columns] = {}
    for rank, (cols, _, _) in checked.items():
        if not 0 <= rank < pgs.world_size:
            raise CommlintInputError(
                f"dump for rank {rank}, but the default group has {pgs.world_size} ranks",
                where(rank),
            )
        names = {pg: inst.trace_name for pg, inst in pgs.by_rank.get(rank, {}).items()}
        cols.group = list(map(names.__getitem__, cols.pg))
        for e in cols.cache.values():
            e.group = names[e.pg]
        per_rank[rank] = cols
    positions, dropped, colls = _aligned_entries(per_rank, pgs, keep_completed)
    kept: dict[int, list[_Entry]] = {}
    for rank, at in positions.items():
        cols = per_rank[rank]
        try:
            cols.fetch(at)  # frames of kept entries that completed here: the dump read once
        except _Bad as exc:
            raise CommlintInputError(f"{exc}", where(rank)) from None
        kept[rank] = [cols.entry(i) for i in at]
    located = _Located(where)
    backends: set[str] = set()
    ranks: dict[int, list[Action]] = {}
    entry_of: dict[int, array] = {}
    stuck: dict[int, str] = {}
    unknown: set[str] = set()
    for rank in sorted(kept):
        builder = _RankBuilder(rank, pgs, located)
        builder.count_p2p(kept[rank])
        for e in kept[rank]:
            builder.add(e)
        builder.close_batch()
        ranks[rank] = builder.actions
        entry_of[rank] = builder.entry_of
        backends |= builder.backends
        unknown |= builder.unknown
        if builder.stuck:
            stuck[rank] = builder.stuck
    members_of = {i.trace_name: i.members for i in pgs.instances.values()}
    findings = _payload_findings(colls, members_of, located)
    # gloo keeps every entry `scheduled`: the states then say nothing about where ranks stop
    states_known = any(
        state not in ("", "scheduled") for c in per_rank.values() for state in set(c.state)
    )
    if not states_known:
        stuck = {}
    ends: dict[int, RankEnd] = {}
    for rank in range(pgs.world_size):
        if rank not in checked:
            ends[rank] = RankEnd(kind="timeout", message="no Flight Recorder dump for this rank")
        else:
            at = stuck.get(rank)
            if not states_known:
                message = "its Flight Recorder dump ends there, entry states not recorded"
            elif at:
                message = f"its Flight Recorder dump ends there, first unfinished entry {at}"
            else:
                message = "its Flight Recorder dump ends there, every entry completed"
            ends[rank] = RankEnd(kind="timeout", message=message)
    backend = sorted(backends)[0] if len(backends) == 1 else None
    meta: dict[str, object] = {
        "flight_recorder": {
            "path": path,
            "files": {r: where(r) for r in sorted(checked)},
            "ranks_with_dumps": sorted(checked),
            "dropped_entries": {r: n for r, n in dropped.items() if n},
            "stuck_at": stuck,
            "states_recorded": states_known,
            "inferred_groups": [],
            "unknown_ops": sorted(unknown),
            "versions": sorted({str(v) for _, _, v in checked.values()}),
            "findings": findings,
            "entry_of": entry_of,
        }
    }
    try:
        trace = _trace(pgs, ranks, ends, backend, meta)
    except ValidationError as exc:  # a value no check above foresaw: still one located line
        raise CommlintInputError(
            f"not a valid trace: {_short(exc).splitlines()[0]}", path
        ) from None
    return validated(trace, path, dict(files) if files else None)


def _trace(pgs: _Groups, ranks: dict, ends: dict, backend: str | None, meta: dict) -> Trace:
    return Trace(
        world_size=pgs.world_size,
        groups=pgs.trace_groups(),
        ranks=ranks,
        ends=ends,
        backend=backend,
        source="flight-recorder",
        meta=meta,
    )


def _payload(e: _Entry) -> tuple[list[int] | None, str | None]:
    dtype = _dtype(e.in_dtypes[0]) if e.in_dtypes else None
    if not e.in_sizes:
        return None, dtype
    if len(e.in_sizes) == 1:
        return list(e.in_sizes[0]), dtype
    return [_total(e.in_sizes)], dtype


def _merge(action: Action, shape: list[int] | None) -> None:
    if shape is None or action.shape is None:
        return
    action.shape = [_numel(action.shape) + _numel(shape)]


# --- findings: at the user's source line, the dump entry beside it ---------------------------


def dump_findings(trace: Trace) -> list[Finding]:
    """What the reader itself found (sizes and dtypes the trace cannot carry: outputs,
    all_to_all totals, collectives that completed with disagreeing buffers), located."""
    fr = trace.meta.get("flight_recorder")
    if not isinstance(fr, dict):
        return []
    out = [Finding(**f) for f in fr.get("findings") or ()]
    for f in out:
        f.path = fr.get("path")
    return out


def locate_findings(trace: Trace, findings: Iterable[Finding]) -> None:
    """Point each finding of a Flight Recorder trace at the source line its dump names (the
    user's frame of the first action that has one); the dump file and entry of every action
    become related locations. Findings without a source line keep the dump as their place."""
    fr = trace.meta.get("flight_recorder")
    if not isinstance(fr, dict):
        return
    files = fr.get("files") or {}
    entry_of = fr.get("entry_of") or {}
    for f in findings:
        related: list[Location] = []
        primary: tuple[str, int] | None = None
        for loc in f.actions:
            if loc.rank is None:
                continue
            entry = None
            if loc.action is not None and loc.rank in entry_of:
                column = entry_of[loc.rank]
                if 0 <= loc.action < len(column) and column[loc.action] >= 0:
                    entry = column[loc.action]
            what = loc.message if loc.message and "entry" in loc.message else None
            if what is None and entry is not None:
                what = f"Flight Recorder entry {entry}"
            file = files.get(loc.rank)
            if file:
                related.append(
                    Location(path=file, rank=loc.rank, message=f"rank {loc.rank}: "
                             f"{what or 'Flight Recorder dump'}")
                )  # fmt: skip
            site_path, site_line = _split_site(loc.site)
            if site_line is not None:
                loc.path, loc.line = site_path, site_line
                primary = primary or (site_path, site_line)
        if primary is None:
            for e in f.cycle or ():
                site_path, site_line = _split_site(e.site)
                if site_line is not None:
                    primary = (site_path, site_line)
                    break
        if primary is not None:
            f.path, f.line, f.col = primary[0], primary[1], None
        seen = {(r.path, r.message) for r in f.related}
        f.related.extend(r for r in related if (r.path, r.message) not in seen)


def _split_site(site: str | None) -> tuple[str, int | None]:
    if not site or ":" not in site:
        return "", None
    file, _, line = site.rpartition(":")
    return file, int(line) if line.isdigit() else None


# --- the command line: --groups, and what `commlint plan` does with the findings -------------

_GROUPS_FILE_LIMIT = 16 << 20


def read_groups_option(value: str) -> dict[str, list[int]]:
    """`--groups FILE|JSON`: a JSON object `{"name or description": [global ranks], …}`
    given inline, or a JSON/YAML file holding one (or a plan file, whose `groups:` is used).
    Raises a `CommlintInputError` naming `--groups` (and the file) when it is not that."""
    text = value.strip()
    source = None
    if not text.startswith("{"):
        source = value
        try:  # the input gate: a regular file of at most 16 MB (a FIFO would block)
            text = read_text(value, _GROUPS_FILE_LIMIT, "a --groups file")
        except CommlintInputError as exc:
            raise CommlintInputError(f"--groups: {exc.error.message}", source) from None
    try:
        if source is None or str(source).endswith(".json"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except RecursionError:
        raise CommlintInputError("--groups: nested too deeply", source) from None
    except Exception as exc:
        raise CommlintInputError(
            f"--groups: not JSON or YAML: {_short(exc).splitlines()[0]}", source
        ) from None
    if isinstance(data, dict) and isinstance(data.get("groups"), dict):
        data = data["groups"]
    if not isinstance(data, dict):
        raise CommlintInputError(
            "--groups: expected an object mapping a group's name or description to its "
            'global ranks, e.g. {"1": [0, 1], "WORLD": [0, 1]}',
            source,
        )
    out: dict[str, list[int]] = {}
    for key, ranks in data.items():
        if not isinstance(ranks, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) for r in ranks
        ):
            raise CommlintInputError(
                f"--groups: group '{key}' must be a list of global ranks (integers)", source
            )
        try:
            out[str(key)] = list(_valid_ranks(tuple(ranks), str(key)))
        except _Bad as exc:
            raise CommlintInputError(f"--groups: {exc}", source) from None
    return out


def finish_findings(trace: Trace, findings: list[Finding]) -> None:
    """After `check_trace` on a Flight Recorder trace: add the reader's own findings
    (`dump_findings`) and point every finding at the source line its dump names."""
    findings.extend(dump_findings(trace))
    locate_findings(trace, findings)
