"""Flight Recorder dumps → `Trace`: explain a hang after the fact with the same checker.

PyTorch's Flight Recorder keeps, per rank, a ring buffer of the collectives and p2p ops it
scheduled, and dumps it on a watchdog timeout (one pickle per rank, `<prefix><rank>`; or JSON
from `_dump_fr_trace_json`). This reader aligns the dumps the way the job ran them:

- entries are read in `record_id` order (the rank's issue order, across every process group);
- collectives meet by process group and `collective_seq_id` (the per-group sequence the
  checker also matches by); p2p ops by channel, in order (`p2p_seq_id` only groups a batch);
- entries older than the oldest one every member still holds are dropped (ring-buffer
  eviction); a prefix of entries that are `completed` on every member is done and dropped too
  (`keep_completed=True` keeps them);
- every rank with a dump ends where its dump ends: the rank was alive but issued nothing more,
  so a peer waiting for it is a *missing rank* (CL202), not a rank that finished;
- each action's `site` is the innermost frame of the user's code (not torch, not the standard
  library); `label` carries the group's sequence id and the entry state.

Sizes and dtypes come from `input_sizes` / `input_dtypes`. Flight Recorder does not record the
root of rooted collectives: the reader uses the group's first rank and says so in the label.
Gloo (torch 2.13) leaves `pg_config` empty, records no send/recv and keeps every state at
`scheduled`: pass `groups=` (or the reader infers each group from the ranks that used it).
"""

from __future__ import annotations

import ast
import gc
import io
import json
import pickle
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from commlint.findings import CommlintInputError
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


class _NoClassesUnpickler(pickle.Unpickler):
    """A dump is plain dicts, lists, tuples, strings and numbers: refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dump")


def read_dump(path: str | Path) -> dict[str, Any]:
    """One rank's dump, pickle or JSON (sniffed from the content, not the name)."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise CommlintInputError(f"cannot read: {exc.strerror}", name) from None
    if raw.lstrip()[:1] == b"{":
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CommlintInputError(f"invalid Flight Recorder JSON dump: {exc}", name) from None
    else:
        try:
            data = _NoClassesUnpickler(io.BytesIO(raw)).load()
        except Exception as exc:
            raise CommlintInputError(
                f"not a Flight Recorder dump (pickle or JSON): {exc}", name
            ) from None
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        raise CommlintInputError("not a Flight Recorder dump: no 'entries' list", name)
    data.setdefault("entries", [])
    return data


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
    for f in sorted(root.iterdir()):
        if not f.is_file() or f.name.startswith("."):
            continue
        if prefix is not None and not f.name.startswith(prefix):
            continue
        m = _RANK_RE.match(f.name)
        if not m or not looks_like_dump(f):
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

    `groups` maps a process group's name or description to its global ranks, for dumps whose
    `pg_config` is empty (gloo). `world_size` overrides the size read from the default group.
    """
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
        dumps = {rank: read_dump(f) for rank, f in files.items()}
        return dumps_to_trace(
            dumps,
            groups=groups,
            world_size=world_size,
            keep_completed=keep_completed,
            path=str(root),
            files={r: str(f) for r, f in files.items()},
        )
    finally:
        if collecting:
            gc.enable()


def _parse_ranks(value: Any) -> list[int]:
    if isinstance(value, str):
        return list(_parse_rank_string(value))
    if isinstance(value, (list, tuple, set)):
        return sorted(int(v) for v in value)
    return []


@lru_cache(maxsize=1024)
def _parse_rank_string(text: str) -> tuple[int, ...]:
    """`pg_config` ranks are a string such as `"[0, 1]"` (JSON; Python syntax as a fallback)."""
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return ()
    if not isinstance(value, (list, tuple, set)):
        return ()
    return tuple(sorted(int(v) for v in value))


def _entry_pg(entry: dict[str, Any]) -> tuple[str, str]:
    pg = entry.get("process_group") or ("", "")
    name = str(pg[0]) if len(pg) > 0 else ""
    desc = str(pg[1]) if len(pg) > 1 else ""
    return name, desc


def _op_name(entry: dict[str, Any]) -> tuple[str, str, str | None]:
    """(backend, raw op name, p2p detail such as `0->1`) from `profiling_name`."""
    return _split_profiling_name(str(entry.get("profiling_name") or ""))


@lru_cache(maxsize=8192)
def _split_profiling_name(profiling: str) -> tuple[str, str, str | None]:
    backend, _, rest = profiling.partition(":")
    if not rest:
        backend, rest = "", profiling
    parts = rest.split(" ", 1)
    return backend, parts[0], parts[1] if len(parts) > 1 else None


def user_frame(frames: list[dict[str, Any]] | None) -> tuple[str | None, list[str]]:
    """The innermost frame outside torch and the standard library, and the frames around it."""
    frames = frames or []
    formatted = [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in frames]
    for i, f in enumerate(frames):
        filename = str(f.get("filename") or "")
        if filename and not _INTERNAL.search(filename):
            rest = [
                s
                for s, g in zip(formatted[i + 1 :], frames[i + 1 :], strict=False)
                if not _INTERNAL.search(str(g.get("filename") or ""))
            ]
            return f"{filename}:{f.get('line')}", rest[:8]
    return None, formatted[:8]


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class _Groups:
    """Process groups of the job: pg name → (trace name, global ranks)."""

    def __init__(
        self,
        dumps: Mapping[int, dict[str, Any]],
        given: Mapping[str, Iterable[int]] | None,
        world_size: int | None,
    ) -> None:
        self.ranks: dict[str, list[int]] = {}
        self.desc: dict[str, str] = {}
        self.inferred: list[str] = []
        given = {str(k): sorted(int(r) for r in v) for k, v in (given or {}).items()}
        used: dict[str, set[int]] = {}
        for rank, dump in dumps.items():
            for pg_name, cfg in (dump.get("pg_config") or {}).items():
                if not isinstance(cfg, dict) or not str(pg_name):
                    continue
                ranks = _parse_ranks(cfg.get("ranks"))
                if ranks:
                    self.ranks.setdefault(str(pg_name), ranks)
                if cfg.get("desc"):
                    self.desc.setdefault(str(pg_name), str(cfg["desc"]))
            for entry in dump["entries"]:
                name, desc = _entry_pg(entry)
                used.setdefault(name, set()).add(rank)
                if desc:
                    self.desc.setdefault(name, desc)
        top = max([*dumps, *(r for rs in self.ranks.values() for r in rs)], default=0)
        for rs in given.values():
            top = max([top, *rs])
        default_size = None
        for name, desc in self.desc.items():
            if desc == "default_pg" and name in self.ranks:
                default_size = len(self.ranks[name])
        self.world_size = world_size or default_size or top + 1
        for name in used:
            desc = self.desc.get(name, "")
            if name in given or desc in given:
                self.ranks[name] = given.get(name) or given[desc]
            elif name not in self.ranks:
                if desc == "default_pg" or (name == "0" and not desc):
                    self.ranks[name] = list(range(self.world_size))
                else:
                    self.ranks[name] = sorted(used[name])
                    self.inferred.append(name)
        self.trace_name: dict[str, str] = {}
        descs = [self.desc.get(n, "") for n in self.ranks]
        for name, ranks in self.ranks.items():
            desc = self.desc.get(name, "")
            if desc == "default_pg" or (ranks == list(range(self.world_size)) and name == "0"):
                self.trace_name[name] = WORLD
            elif desc and desc != "undefined" and descs.count(desc) == 1 and desc != WORLD:
                self.trace_name[name] = desc
            elif desc and desc != "undefined":
                self.trace_name[name] = f"{desc}:{name}"
            else:
                self.trace_name[name] = f"pg{name}"

    def trace_groups(self) -> dict[str, list[int]]:
        return {
            self.trace_name[n]: rs for n, rs in self.ranks.items() if self.trace_name[n] != WORLD
        }


def _aligned_entries(
    dumps: Mapping[int, dict[str, Any]], groups: _Groups, keep_completed: bool
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, int]]:
    """Per rank, the entries to check: evicted-on-some-rank and done-everywhere ones dropped."""
    # (entry, pg, is p2p, seq) once per entry: dumps hold thousands of entries per rank
    per_rank: dict[int, list[tuple[dict[str, Any], str, bool, int]]] = {}
    for r, d in dumps.items():
        rows = []
        for e in sorted(d["entries"], key=lambda e: int(e.get("record_id", 0))):
            raw = _op_name(e)[1]
            if not raw:
                continue
            p2p = bool(e.get("is_p2p")) or raw in ("send", "recv")
            rows.append((e, _entry_pg(e)[0], p2p, int(e.get("collective_seq_id", 0) or 0)))
        per_rank[r] = rows
    start: dict[str, int] = {}  # first collective seq every dumped member still holds
    done: dict[str, int] = {}  # last seq completed on every dumped member
    for rows in per_rank.values():
        first: dict[str, int] = {}
        leading: dict[str, int] = {}
        broken: set[str] = set()
        for e, pg, p2p, seq in rows:
            if p2p:
                continue
            first.setdefault(pg, seq)
            if pg not in broken and e.get("state") == "completed":
                leading[pg] = seq
            else:
                broken.add(pg)
        for pg, seq in first.items():
            start[pg] = max(start.get(pg, seq), seq)
            last_done = leading.get(pg, seq - 1)
            done[pg] = min(done.get(pg, last_done), last_done)
    dropped_ids: set[int] = set()
    if not keep_completed:
        # p2p: per channel, the leading ops completed on both sides
        sends: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        recvs: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
        for r, rows in per_rank.items():
            for e, pg, p2p, _ in rows:
                op = _op_name(e)[1] if p2p else ""
                if op not in ("send", "recv"):
                    continue
                peer = _p2p_peer(e, groups.ranks.get(pg, []))
                if peer is None:
                    continue
                if op == "send":
                    sends.setdefault((pg, r, peer), []).append(e)
                else:
                    recvs.setdefault((pg, peer, r), []).append(e)
        for chan, ss in sends.items():
            rs = recvs.get(chan, [])
            k = 0
            while (
                k < len(ss)
                and k < len(rs)
                and ss[k].get("state") == "completed"
                and rs[k].get("state") == "completed"
            ):
                dropped_ids.add(id(ss[k]))
                dropped_ids.add(id(rs[k]))
                k += 1
    out: dict[int, list[dict[str, Any]]] = {}
    dropped: dict[int, int] = {}
    for r, rows in per_rank.items():
        kept = []
        for e, pg, p2p, seq in rows:
            if p2p:
                if id(e) in dropped_ids:
                    continue
            elif seq < start.get(pg, 0) or (not keep_completed and seq <= done.get(pg, -1)):
                continue
            kept.append(e)
        dropped[r] = len(rows) - len(kept)
        out[r] = kept
    return out, dropped


def _p2p_peer(entry: dict[str, Any], pg_ranks: list[int]) -> int | None:
    """Global peer of a `send a->b` / `recv a<-b` entry (group-local ranks in the name)."""
    _, op, detail = _op_name(entry)
    if not detail:
        return None
    sep = "->" if op == "send" else "<-"
    if sep not in detail:
        return None
    local_peer = int(detail.split(sep)[1])
    if pg_ranks:
        if not 0 <= local_peer < len(pg_ranks):
            return None
        return pg_ranks[local_peer]
    return local_peer


class _RankBuilder:
    """One rank's entries → actions: p2p batches become isend/irecv + wait."""

    def __init__(self, rank: int, pgs: _Groups) -> None:
        self.rank, self.pgs = rank, pgs
        self.actions: list[Action] = []
        self.backends: set[str] = set()
        self.unknown: set[str] = set()
        self.stuck: str | None = None
        self.batch_key: tuple[str, int] | None = None
        self.batch_handles: list[str] = []
        self.n_batches = 0
        self.last_coll: tuple[str, int] | None = None
        self.p2p_count: Counter[tuple[str, int]] = Counter()

    def count_p2p(self, entries: list[dict[str, Any]]) -> None:
        self.p2p_count = Counter(
            (_entry_pg(e)[0], int(e.get("p2p_seq_id", -1)))
            for e in entries
            if _op_name(e)[1] in ("send", "recv")
        )

    def close_batch(self) -> None:
        if self.batch_key is not None and self.batch_handles:
            self.actions.append(Action(op="wait", handles=list(self.batch_handles)))
        self.batch_key, self.batch_handles = None, []

    def add(self, e: dict[str, Any]) -> None:
        backend, raw, _ = _op_name(e)
        if backend:
            self.backends.add(backend)
        pg, _ = _entry_pg(e)
        if raw in MARKERS:
            self.close_batch()
            return
        op = OP_NAMES.get(raw)
        if op is None:
            self.unknown.add(raw)
            return
        state = str(e.get("state") or "")
        group = self.pgs.trace_name.get(pg, WORLD)
        pg_ranks = self.pgs.ranks.get(pg, [])
        site, stack = user_frame(e.get("frames"))
        shape, dtype = _payload(e)
        common = {"shape": shape, "dtype": dtype, "site": site, "stack": stack or None}
        if state != "completed" and self.stuck is None:
            self.stuck = f"{op}({group}) {state or 'scheduled'}"
        if op in ("send", "recv"):
            self._add_p2p(e, op, pg, group, pg_ranks, state, common)
            return
        self.close_batch()
        seq = int(e.get("collective_seq_id", 0))
        if self.last_coll == (pg, seq) and self.actions and self.actions[-1].group == group:
            _merge(self.actions[-1], shape)  # a coalesced collective: one op per tensor list
            return
        self.last_coll = (pg, seq)
        root = None
        label = f"{group}#{seq} {state}".strip()
        if op in ("broadcast", "reduce", "gather", "scatter"):
            root = pg_ranks[0] if pg_ranks else 0
            label += " (root not recorded)"
        self.actions.append(Action(op=op, group=group, root=root, label=label, **common))

    def _add_p2p(self, e, op, pg, group, pg_ranks, state, common) -> None:
        peer = _p2p_peer(e, pg_ranks)
        if peer is None:
            self.unknown.add(str(e.get("profiling_name")))
            return
        seq = int(e.get("p2p_seq_id", 0))
        key = (pg, seq)
        label = f"{group} p2p#{seq} {state}".strip()
        if self.p2p_count[key] > 1:  # ops sharing a p2p_seq_id were issued as one batch
            if self.batch_key != key:
                self.close_batch()
                self.batch_key = key
                self.n_batches += 1
            handle = f"b{self.n_batches}.{len(self.batch_handles)}"
            self.batch_handles.append(handle)
            self.actions.append(
                Action(
                    op="isend" if op == "send" else "irecv",
                    group=group,
                    peer=peer,
                    handle=handle,
                    batch=f"b{self.n_batches}",
                    label=label,
                    **common,
                )
            )
            return
        self.close_batch()
        self.actions.append(Action(op=op, group=group, peer=peer, label=label, **common))


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
    pgs = _Groups(dumps, groups, world_size)
    entries, dropped = _aligned_entries(dumps, pgs, keep_completed)
    backends: set[str] = set()
    ranks: dict[int, list[Action]] = {}
    stuck: dict[int, str] = {}
    unknown: set[str] = set()
    for rank in sorted(entries):
        if not 0 <= rank < pgs.world_size:
            raise CommlintInputError(
                f"dump for rank {rank}, but the default group has {pgs.world_size} ranks",
                (files or {}).get(rank, path),
            )
        builder = _RankBuilder(rank, pgs)
        builder.count_p2p(entries[rank])
        for e in entries[rank]:
            builder.add(e)
        builder.close_batch()
        ranks[rank] = builder.actions
        backends |= builder.backends
        unknown |= builder.unknown
        if builder.stuck:
            stuck[rank] = builder.stuck
    # gloo keeps every entry `scheduled`: the states then say nothing about where ranks stop
    states_known = any(
        e.get("state") not in (None, "", "scheduled") for d in dumps.values() for e in d["entries"]
    )
    if not states_known:
        stuck = {}
    ends: dict[int, RankEnd] = {}
    for rank in range(pgs.world_size):
        if rank not in dumps:
            ends[rank] = RankEnd(kind="timeout", message="no Flight Recorder dump for this rank")
        else:
            where = stuck.get(rank)
            if not states_known:
                message = "its Flight Recorder dump ends there, entry states not recorded"
            elif where:
                message = f"its Flight Recorder dump ends there, first unfinished entry {where}"
            else:
                message = "its Flight Recorder dump ends there, every entry completed"
            ends[rank] = RankEnd(kind="timeout", message=message)
    backend = sorted(backends)[0] if len(backends) == 1 else None
    meta: dict[str, object] = {
        "flight_recorder": {
            "path": path,
            "ranks_with_dumps": sorted(dumps),
            "dropped_entries": {r: n for r, n in dropped.items() if n},
            "stuck_at": stuck,
            "states_recorded": states_known,
            "inferred_groups": [pgs.trace_name[n] for n in pgs.inferred],
            "unknown_ops": sorted(unknown),
            "versions": sorted({str(d.get("version")) for d in dumps.values()}),
        }
    }
    trace_data = {
        "world_size": pgs.world_size,
        "groups": pgs.trace_groups(),
        "ranks": ranks,
        "ends": ends,
        "backend": backend,
        "source": "flight-recorder",
        "meta": meta,
    }
    return validated(Trace(**trace_data), path, dict(files) if files else None)


def _payload(entry: dict[str, Any]) -> tuple[list[int] | None, str | None]:
    sizes = entry.get("input_sizes") or []
    dtypes = entry.get("input_dtypes") or []
    dtype = DTYPES.get(str(dtypes[0]), str(dtypes[0]).lower()) if dtypes else None
    if not sizes:
        return None, dtype
    if len(sizes) == 1:
        return [int(d) for d in sizes[0]], dtype
    return [sum(_numel(s) for s in sizes)], dtype


def _merge(action: Action, shape: list[int] | None) -> None:
    if shape is None or action.shape is None:
        return
    action.shape = [_numel(action.shape) + _numel(shape)]
