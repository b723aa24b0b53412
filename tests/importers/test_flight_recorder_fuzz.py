"""Fuzzing the Flight Recorder reader: dumps mutated field by field (JSON values of every
type in every place, pickles of the same) are either read and checked or refused with one
located `CommlintInputError` — never another exception — and the same dump gives the same
verdict twice."""

from __future__ import annotations

import copy
import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlint import check
from commlint.findings import CommlintInputError
from commlint.plans.importers.flight_recorder import dumps_to_trace, read_dump

ENTRY_KEYS = [
    "record_id",
    "profiling_name",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "state",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "is_p2p",
    "frames",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
    | st.sampled_from(["nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0", "gloo:barrier"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def base_dumps() -> dict[int, dict]:
    def entry(i: int, op: str, pg: str, seq: int, state: str) -> dict:
        return {
            "record_id": i,
            "profiling_name": f"nccl:{op}",
            "process_group": [pg, "default_pg" if pg == "0" else "tp"],
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "state": state,
            "input_sizes": [[4, 2]],
            "output_sizes": [[4, 2]],
            "input_dtypes": ["Float"],
            "output_dtypes": ["Float"],
            "is_p2p": False,
            "frames": [{"name": "f", "filename": "/job/t.py", "line": 10 + i}],
        }

    config = {
        "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
        "1": {"name": "1", "desc": "tp", "ranks": "[0, 1]"},
    }
    return {
        r: {
            "version": "2.10",
            "pg_config": copy.deepcopy(config),
            "entries": [
                entry(0, "all_reduce", "0", 1, "completed"),
                entry(1, "all_reduce", "1", 1, "started"),
                entry(2, "broadcast", "0", 2, "scheduled"),
            ],
        }
        for r in (0, 1)
    }


mutation = st.tuples(
    st.sampled_from(["entry", "drop", "top", "config"]),
    st.integers(0, 1),  # rank
    st.integers(0, 2),  # entry
    st.sampled_from([*ENTRY_KEYS, "version", "pg_config", "entries", "ranks", "desc"]),
    json_values,
)


def mutate(dumps: dict[int, dict], muts) -> None:
    for kind, rank, index, key, value in muts:
        d = dumps[rank]
        entries = d["entries"]
        target = (
            entries[index]
            if isinstance(entries, list)
            and index < len(entries)
            and isinstance(entries[index], dict)
            else None
        )
        if kind == "entry" and key in ENTRY_KEYS and target is not None:
            target[key] = value
        elif kind == "drop" and key in ENTRY_KEYS and target is not None:
            target.pop(key, None)
        elif kind == "top" and key in ("version", "pg_config", "entries"):
            d[key] = value
        elif kind == "config" and key in ("ranks", "desc") and isinstance(d["pg_config"], dict):
            d["pg_config"]["1"][key] = value


def verdict(dumps) -> tuple:
    try:
        trace = dumps_to_trace(copy.deepcopy(dumps), path="dumps")
    except CommlintInputError as exc:
        assert exc.error.path == "dumps" and exc.error.message
        assert "\n" not in exc.error.message
        return ("error", exc.error.message)
    findings = check(trace, None).findings
    return ("ok", sorted((f.code, f.message) for f in findings))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_dumps_are_read_or_refused_with_a_located_line(muts):
    dumps = base_dumps()
    mutate(dumps, muts)
    assert verdict(dumps) == verdict(dumps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=2), st.integers(0, 4))
def test_mutated_pickles_never_raise_anything_else(tmp_path_factory, muts, protocol):
    dumps = base_dumps()
    mutate(dumps, muts)
    folder = tmp_path_factory.mktemp("fz")
    f = folder / "rank_0"
    f.write_bytes(pickle.dumps(dumps[0], protocol=protocol))
    try:
        data = read_dump(f)
        dumps_to_trace({0: data, 1: base_dumps()[1]}, files={0: str(f)}, path=str(folder))
    except CommlintInputError as exc:
        assert exc.error.path in (str(f), str(folder))
