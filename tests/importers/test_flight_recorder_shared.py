"""Entries of one dump that carry the same frames, sizes and dtypes share one copy (memory of
a 16M-entry job); values that differ only in type (1 / True) are never shared."""

from __future__ import annotations

import json
import pickle

from commlint.cli import main
from commlint.plans.importers import flight_recorder
from commlint.plans.importers.flight_recorder import _checked_dump


def entry(record_id: int, seq: int, line: object = 3, state: str = "started") -> dict:
    return {
        "record_id": record_id,
        "profiling_name": "nccl:all_reduce",
        "process_group": ["0", "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "state": state,
        "input_sizes": [[8]],
        "output_sizes": [[8]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "frames": [{"name": "step", "filename": "/job/train.py", "line": line}],
    }


def dump(entries: list[dict]) -> dict:
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "entries": entries,
    }


def test_equal_payloads_are_one_object_and_unequal_ones_are_not() -> None:
    raw = pickle.loads(pickle.dumps(dump([entry(0, 1), entry(1, 2), entry(2, 3, line=4)])))
    entries, _, _ = _checked_dump(raw, "rank_0")
    a, b, c = entries
    assert a.frames is b.frames and a.in_sizes is b.in_sizes and a.out_dtypes is b.out_dtypes
    assert a.frames is not c.frames
    assert a.in_sizes == c.in_sizes


def test_a_true_line_next_to_an_equal_integer_line_is_still_refused(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(flight_recorder, "SHARE_AFTER", 0)  # share from the first dump on
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in (0, 1):
        body = dump([entry(0, 1), entry(1, 2, line=3 if rank == 0 else True)])
        (folder / f"rank_{rank}.json").write_text(json.dumps(body))
    assert main(["plan", str(folder), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'rank_1.json'}: entry 1: a frame's 'line' is a boolean" in err, err
