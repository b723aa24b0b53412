"""Flight Recorder dumps built in the documented schema, for the NCCL-shaped fields gloo lacks
(p2p entries, `started`/`completed` states, filled `pg_config`).

Schema: torch/csrc/distributed/c10d/FlightRecorder*.{hpp,cpp} and the field list read by
torch/distributed/flight_recorder/components (version 2.10, as torch 2.13 writes).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

TORCH_FRAMES = [
    {
        "name": "all_reduce",
        "filename": "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
        "line": 3245,
    },
    {
        "name": "wrapper",
        "filename": "/usr/lib/python3.11/site-packages/torch/distributed/c10d_logger.py",
        "line": 83,
    },
]


def frames(user_line: int, func: str = "train_step", file: str = "/job/train.py") -> list:
    return [
        *TORCH_FRAMES,
        {"name": func, "filename": file, "line": user_line},
        {"name": "main", "filename": file, "line": 200},
        {"name": "_run_module_as_main", "filename": "/usr/lib/python3.11/runpy.py", "line": 198},
    ]


class Rank:
    """Entries of one rank, appended in issue order."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.entries: list[dict[str, Any]] = []
        self.coll_seq: dict[str, int] = {}
        self.p2p_seq: dict[str, int] = {}

    def _entry(self, pg, desc, name, state, sizes, dtype, line, *, p2p, seq_c, seq_p) -> None:
        self.entries.append(
            {
                "record_id": len(self.entries),
                "pg_id": int(pg) if str(pg).isdigit() else 0,
                "process_group": (str(pg), desc),
                "collective_seq_id": seq_c,
                "p2p_seq_id": seq_p,
                "op_id": len(self.entries) + 1,
                "profiling_name": f"nccl:{name}",
                "time_created_ns": 1_000_000 * (len(self.entries) + 1),
                "input_sizes": sizes,
                "input_dtypes": [dtype] * len(sizes),
                "output_sizes": sizes,
                "output_dtypes": [dtype] * len(sizes),
                "state": state,
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": state == "completed",
                "timeout_ms": 600000,
                "is_p2p": p2p,
                "frames": frames(line),
                "thread_id": "1",
                "thread_name": "python",
            }
        )

    def coll(
        self,
        op,
        pg="0",
        desc="default_pg",
        state="completed",
        size=8,
        dtype="Float",
        line=41,
        same_seq=False,
    ) -> Rank:
        if not same_seq:
            self.coll_seq[pg] = self.coll_seq.get(pg, 0) + 1
        sizes = [] if op == "barrier" else [[size]]
        self._entry(
            pg, desc, op, state, sizes, dtype, line, p2p=False, seq_c=self.coll_seq[pg], seq_p=0
        )
        return self

    def p2p(
        self,
        op,
        local_self,
        local_peer,
        pg="0",
        desc="default_pg",
        state="started",
        size=8,
        line=60,
        batch=False,
    ) -> Rank:
        if not batch or pg not in self.p2p_seq:
            self.p2p_seq[pg] = self.p2p_seq.get(pg, 0) + 1
        name = (
            f"send {local_self}->{local_peer}"
            if op == "send"
            else f"recv {local_self}<-{local_peer}"
        )
        self._entry(
            pg,
            desc,
            name,
            state,
            [[size]],
            "Float",
            line,
            p2p=True,
            seq_c=self.coll_seq.get(pg, 0),
            seq_p=self.p2p_seq[pg],
        )
        return self

    def end_batch(self, pg="0", desc="default_pg", state="started") -> Rank:
        self._entry(
            pg,
            desc,
            "coalesced",
            state,
            [],
            "Float",
            0,
            p2p=True,
            seq_c=self.coll_seq.get(pg, 0),
            seq_p=self.p2p_seq[pg],
        )
        return self


def write(
    folder: Path, ranks: list[Rank], groups: dict[str, tuple[str, list[int]]], as_json: bool = False
) -> Path:
    """One dump per rank, `rank_<r>`; `groups`: pg name → (desc, global ranks)."""
    folder.mkdir(parents=True, exist_ok=True)
    pg_config = {
        name: {"name": name, "desc": desc, "ranks": json.dumps(members)}
        for name, (desc, members) in groups.items()
    }
    for r in ranks:
        dump = {
            "version": "2.10",
            "comm_lib_version": "2.27.5",
            "pg_config": pg_config,
            "pg_status": {},
            "entries": r.entries,
        }
        if as_json:
            (folder / f"rank_{r.rank}.json").write_text(json.dumps(dump))
        else:
            (folder / f"rank_{r.rank}").write_bytes(pickle.dumps(dump))
    return folder
