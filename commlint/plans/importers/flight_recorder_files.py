"""Flight Recorder dumps as files: which files are dumps, which rank each is, and reading one
(pickle or JSON) without running code — the unpickler loads no class — into plain data.
Also the names Flight Recorder uses (ops, dtypes, markers) that every later stage reads.

First stage of `commlint.plans.importers.flight_recorder`: files -> entries -> groups ->
alignment -> payloads -> lowering to a Trace."""

from __future__ import annotations

import io
import json
import pickle
import re
from pathlib import Path
from typing import Any

from commlint.findings import CommlintInputError
from commlint.plans.gate import memory_budget, read_input
from commlint.trace import WORLD

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


class _Bad(Exception):
    """A field that is not what Flight Recorder writes; caught and located by the caller."""
