"""Entries of one dump that carry the same frames, sizes and dtypes share one copy (memory of
a 16M-entry job); values that differ only in type (1 / True) are never shared. The frames of
`completed` entries are not kept: read again from the dump when a finding names them."""

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
    cols, _, _ = _checked_dump(raw, "rank_0")
    a, b, c = (cols.entry(i) for i in range(len(cols)))
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


def test_completed_entries_frames_are_read_again_for_a_finding(tmp_path, capsys) -> None:
    """Rank 1's all_reduce #2 completed with other sizes than rank 0's (silent corruption): the
    finding is located at each rank's own frame, though neither dump's frames were kept."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in (0, 1):
        rows = [entry(i, i + 1, line=10 + i, state="completed") for i in range(3)]
        rows[1]["input_sizes"] = rows[1]["output_sizes"] = [[8 + rank]]
        rows[1]["frames"] = [{"name": "step", "filename": "/job/train.py", "line": 40 + rank}]
        rows.append(entry(3, 4, line=13))
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump(rows)))
    cols, _, _ = _checked_dump(
        pickle.loads((folder / "rank_0").read_bytes()), "rank_0", reread=lambda: []
    )
    assert sorted(cols.frames) == [3]  # only the entry that did not complete
    assert main(["plan", str(folder), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (finding,) = report["findings"]
    assert finding["code"] == "CL204" and "completed on every rank" in finding["message"]
    sites = {a["rank"]: a["site"] for a in finding["actions"]}
    assert sites == {0: "/job/train.py:40", 1: "/job/train.py:41"}


def test_a_dump_that_changes_while_read_is_an_input_error(tmp_path, capsys, monkeypatch) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in (0, 1):
        rows = [entry(0, 1, state="completed"), entry(1, 2, state="completed")]
        rows[1]["input_sizes"] = rows[1]["output_sizes"] = [[8 + rank]]
        rows.append(entry(2, 3))
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump(rows)))
    real = flight_recorder._to_trace

    def rewrite_then_convert(*args, **kwargs):  # the job rewrites rank 1's dump meanwhile
        (folder / "rank_1").write_bytes(pickle.dumps(dump([entry(0, 1)] * 5)))
        return real(*args, **kwargs)

    monkeypatch.setattr(flight_recorder, "_to_trace", rewrite_then_convert)
    assert main(["plan", str(folder), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'rank_1'}: entry 1: the dump changed while it was being read" in err, err
    assert "Traceback" not in err
