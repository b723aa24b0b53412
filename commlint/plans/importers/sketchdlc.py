"""SketchDLC trace files (parameter-server push/pull, one file per node) → `Trace`.

The format is SketchDLC's DLC trace (Xu et al., §4.1, Table 1): an optional header
(`num_workers:= 2 num_servers:= 1 …`), then one record per line, whitespace separated:

    id src dst length num_pp OP:= operation op_id dep_type d_time time_sec time_usec id_dep

`operation` is `Push|Pull _ Send|Recv _ Worker|Server` (or `SendCom_To_Servers` for connection
set-up, which has no later fields); `op_id` is `key-operation_num-node` (`6-4-s0`). Node ranks
follow the paper: workers `0…W-1`, servers `W…W+S-1`, then the scheduler.

Each file is one node's view, in record order. A record whose `src` is the node is a send to
`dst`, else a receive from `src`. ps-lite sends are non-blocking (ZMQ queues them): a send is
an `isend`, and the node waits for all of its sends when it ends; a receive blocks, since the
next step of the key (push → ack → pull → parameters) needs it. Messages meet per
(src, dst, key) in order — the tag is the parameter key — so records of different keys that a
node logged out of order (non-blocking dispatch) never pair up wrongly. Byte lengths go to the
label only: the two ends of one message log different lengths (metadata is counted on one side).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from commlint.findings import CommlintInputError
from commlint.plans.gate import is_regular, read_input
from commlint.plans.importers.common import validated
from commlint.trace import Action, Trace

_HEADER = re.compile(r"num_workers:=\s*(\d+).*?num_servers:=\s*(\d+)", re.S)
_MAX_DIGITS = 18  # ids, nodes, lengths and keys are 64-bit in ps-lite
_ROLE_OP = re.compile(r"^(Push|Pull)_(Send|Recv)_(Worker|Server)$", re.I)


@dataclass
class Record:
    """One line of a node's trace file."""

    line: int
    id: int
    src: int
    dst: int
    length: int
    num_pp: int
    operation: str
    op_id: str | None

    @property
    def key(self) -> int:
        """The parameter key from `op_id` (`6-4-s0` → 6); 0 for set-up records."""
        if self.op_id:
            head = self.op_id.split("-", 1)[0]
            if head.lstrip("-").isdigit() and len(head) <= _MAX_DIGITS:
                return int(head)
        return 0


@dataclass
class NodeTrace:
    """A parsed file: its records, the node it belongs to, and the header's counts."""

    path: str
    node: int
    records: list[Record]
    num_workers: int | None = None
    num_servers: int | None = None


def parse_records(text: str, path: str | None = None) -> tuple[list[Record], tuple | None]:
    """Records of one file, and (num_workers, num_servers) from its header if present."""
    records: list[Record] = []
    header = _HEADER.search(text)
    counts = None
    if header:
        if max(len(header.group(1)), len(header.group(2))) > _MAX_DIGITS:
            line = text.count("\n", 0, header.start()) + 1
            raise CommlintInputError("header: a node count too long to be one", path, line)
        counts = (int(header.group(1)), int(header.group(2)))
    for n, raw in enumerate(text.splitlines(), start=1):
        if "OP:=" not in raw:
            continue
        left, _, right = raw.partition("OP:=")
        head = left.split()
        tail = right.split()
        if len(head) < 5 or not tail:
            raise CommlintInputError(
                "record needs 'id src dst length num_pp OP:= operation'", path, n
            )
        if any(len(x) > _MAX_DIGITS for x in head[-5:]):
            raise CommlintInputError(
                f"id, src, dst, length and num_pp must be integers of at most {_MAX_DIGITS} digits",
                path,
                n,
            )
        try:
            rid, src, dst, length, num_pp = (int(x) for x in head[-5:])
        except ValueError:
            raise CommlintInputError(
                f"id, src, dst, length and num_pp must be integers, got {' '.join(head[-5:])!r}",
                path,
                n,
            ) from None
        op_id = tail[1] if len(tail) > 1 else None
        records.append(Record(n, rid, src, dst, length, num_pp, tail[0], op_id))
    return records, counts


def _node_of(records: list[Record], path: str | None) -> int:
    """The node a file belongs to: the side that performs each Push/Pull operation."""
    for r in records:
        m = _ROLE_OP.match(r.operation)
        if m:
            return r.src if m.group(2).lower() == "send" else r.dst
    common: set[int] | None = None
    for r in records:
        common = {r.src, r.dst} if common is None else common & {r.src, r.dst}
    if common and len(common) == 1:
        return common.pop()
    raise CommlintInputError(
        "cannot tell which node this file belongs to (no Push/Pull record)", path
    )


def read_node(path: str | Path) -> NodeTrace:
    name = str(path)
    raw = read_input(path, what="a SketchDLC trace")
    text = raw.decode("utf-8", errors="replace")
    records, counts = parse_records(text, name)
    _check_counts(records, counts, len(raw), name)
    if not records:
        raise CommlintInputError("no SketchDLC records (lines with 'OP:=')", name)
    node = _node_of(records, name)
    for r in records:
        if node not in (r.src, r.dst):
            raise CommlintInputError(
                f"record {r.id} is between nodes {r.src} and {r.dst}; this file is node {node}'s",
                name,
                r.line,
            )
        if r.src == r.dst:
            raise CommlintInputError(f"record {r.id} sends node {r.src} to itself", name, r.line)
    return NodeTrace(name, node, records, *(counts or (None, None)))


def nodes_to_trace(nodes: list[NodeTrace], path: str | None = None) -> Trace:
    """Per-node files → one trace; see the module docstring for the semantics."""
    by_node: dict[int, NodeTrace] = {}
    for n in nodes:
        if n.node in by_node:
            raise CommlintInputError(
                f"two files for node {n.node}: {by_node[n.node].path} and {n.path}", path
            )
        by_node[n.node] = n
    top = max(max(r.src, r.dst) for n in nodes for r in n.records)
    declared = [
        (n.num_workers or 0) + (n.num_servers or 0) for n in nodes if n.num_workers is not None
    ]
    world = max([top + 1, *declared])
    workers = next((n.num_workers for n in nodes if n.num_workers is not None), None)
    servers = next((n.num_servers for n in nodes if n.num_servers is not None), None)
    ranks: dict[int, list[Action]] = {}
    for node, nt in sorted(by_node.items()):
        acts: list[Action] = []
        sends: list[str] = []
        for r in nt.records:
            label = f"{r.operation} {r.op_id or ''} {r.length} B".replace("  ", " ")
            site = f"{nt.path}:{r.line}"
            if r.src == node:
                handle = f"m{r.id}.{len(sends)}"
                sends.append(handle)
                acts.append(
                    Action(op="isend", peer=r.dst, tag=r.key, handle=handle, label=label, site=site)
                )
            else:
                acts.append(Action(op="recv", peer=r.src, tag=r.key, label=label, site=site))
        if sends:
            acts.append(Action(op="wait", handles=sends, label="node exits", site=nt.path))
        ranks[node] = acts
    groups: dict[str, list[int]] = {}
    if workers:
        groups["workers"] = list(range(workers))
    if workers and servers:
        groups["servers"] = list(range(workers, workers + servers))
    return Trace(
        world_size=world,
        groups=groups,
        ranks=ranks,
        source="sketchdlc",
        meta={"sketchdlc": {"files": {str(k): v.path for k, v in sorted(by_node.items())}}},
    )


def load_sketchdlc(path: str | Path) -> Trace:
    """Read a folder of per-node SketchDLC trace files (or one file) into a `Trace`."""
    root = Path(path)
    if root.is_dir():
        files = [
            f
            for f in sorted(root.iterdir())
            if f.is_file() and not f.name.startswith(".") and _has_records(f)
        ]
        if not files:
            raise CommlintInputError("no SketchDLC trace files (with 'OP:=' records)", str(root))
    elif root.is_file():
        files = [root]
    else:
        raise CommlintInputError("no such file or directory", str(root))
    return validated(nodes_to_trace([read_node(f) for f in files], str(root)), str(root))


def _check_counts(records: list[Record], counts: tuple | None, size: int, name: str) -> None:
    """Node numbers and the header's counts size the trace (one rank per node): a number is
    refused when it exceeds the bytes of the file that states it — a 90-byte header asking for
    10¹² workers would otherwise ask for terabytes. Real files hold many records per node."""
    if counts is not None:
        for field_name, count in zip(("num_workers", "num_servers"), counts, strict=True):
            if count > size:
                raise CommlintInputError(
                    f"header: {field_name} {count} is more nodes than the file has "
                    f"bytes ({size}); not a SketchDLC header",
                    name,
                    1,
                )
    for r in records:
        for field_name in ("src", "dst"):
            node = getattr(r, field_name)
            if not 0 <= node <= size:
                raise CommlintInputError(
                    f"record {r.id}: {field_name} {node} is not a node this "
                    f"file can name (0…{size}, its size in bytes)",
                    name,
                    r.line,
                )


def _has_records(f: Path) -> bool:
    if not is_regular(f):
        return False
    try:
        with open(f, "rb") as fh:
            return b"OP:=" in fh.read(1 << 16)
    except OSError:
        return False
