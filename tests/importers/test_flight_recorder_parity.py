"""The scenarios of PyTorch's own fr_trace tests (test/distributed/flight_recorder/
test_fr_analysis.py), written again here as our own dump dicts: what fr_trace flags, we flag;
what it lets through by design (gather outputs on non-roots, coalesced batches), we let
through; and where it has no answer (all_to_all), we compare the totals."""

from __future__ import annotations

from typing import Any

from commlint import check
from commlint.cli import main
from commlint.graph import check_trace
from commlint.plans.importers.flight_recorder import (
    dump_findings,
    dumps_to_trace,
    load_flight_recorder,
)

DEFAULT = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}


def entry(
    record_id: int,
    op: str,
    in_sizes: list,
    out_sizes: list,
    *,
    state: str = "completed",
    seq: int = 1,
    pg: tuple[str, str] = ("0", "default_pg"),
    in_dtype: str = "Float",
    out_dtype: str = "Float",
    line: int = 40,
) -> dict[str, Any]:
    return {
        "record_id": record_id,
        "profiling_name": f"nccl:{op}",
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "state": state,
        "input_sizes": in_sizes,
        "output_sizes": out_sizes,
        "input_dtypes": [in_dtype] * len(in_sizes) if in_dtype else [],
        "output_dtypes": [out_dtype] * len(out_sizes) if out_dtype else [],
        "is_p2p": False,
        "frames": [{"name": "step", "filename": "/job/train.py", "line": line}],
    }


def dumps(r0: list, r1: list, config0: dict | None = None, config1: dict | None = None):
    return {
        0: {"version": "2.10", "pg_config": config0 or DEFAULT, "entries": r0},
        1: {"version": "2.10", "pg_config": config1 or DEFAULT, "entries": r1},
    }


def all_findings(d) -> list:
    trace = dumps_to_trace(d, path="dumps")
    return check(trace, None).findings


def test_one_group_name_with_distinct_members_per_rank_is_not_a_non_member_call():
    """fr_trace's build_db case 1: `sub_pg` is [0] on rank 0 and [1] on rank 1."""
    sub0 = {**DEFAULT, "1": {"name": "1", "desc": "sub_pg", "ranks": "[0]"}}
    sub1 = {**DEFAULT, "1": {"name": "1", "desc": "sub_pg", "ranks": "[1]"}}
    for state in ("completed", "scheduled"):
        r0 = [
            entry(0, "all_reduce", [[4, 4]], [[4, 4]], state=state),
            entry(1, "all_reduce", [[5, 5]], [[5, 5]], pg=("1", "sub_pg"), state=state),
        ]
        r1 = [
            entry(0, "all_reduce", [[4, 4]], [[4, 4]], state=state),
            entry(1, "all_reduce", [[5, 5]], [[5, 5]], pg=("1", "sub_pg"), state=state),
        ]
        d = dumps(r0, r1, sub0, sub1)
        trace = dumps_to_trace(d, keep_completed=True)
        assert trace.groups == {"sub_pg:1@0": [0], "sub_pg:1@1": [1]}
        assert [a.group for a in trace.ranks[1]] == ["WORLD", "sub_pg:1@1"]
        assert all_findings(d) == []


def test_size_mismatch_on_entries_completed_everywhere_is_silent_corruption():
    """fr_trace's case 4 (`_broadcast_oop` of [4, 4] on rank 0, [5, 5] on rank 1, both done)."""
    r0 = [entry(0, "_broadcast_oop", [[4, 4]], [[4, 4]], line=41)]
    r1 = [entry(0, "_broadcast_oop", [[5, 5]], [[5, 5]], line=42)]
    d = dumps(r0, r1)
    trace = dumps_to_trace(d, path="dumps")
    assert trace.ranks[0] == [] and trace.ranks[1] == []  # done: nothing left to replay
    assert check_trace(trace, None).findings == []  # the checker alone: nothing hung
    (f,) = dump_findings(trace)
    assert f.code == "CL204" and f.ranks == [0, 1]
    assert f.message.startswith("broadcast #1 on group 'WORLD' disagrees: input sizes")
    assert "[[4, 4]] on rank 0 @/job/train.py:41, [[5, 5]] on rank 1 @/job/train.py:42" in (
        f.message
    )
    assert "completed on every rank" in f.message and "silently wrong" in f.message
    (f,) = all_findings(d)
    assert (f.path, f.line) == ("/job/train.py", 41)


def test_output_sizes_are_compared():
    """fr_trace's e1/e6: same inputs, outputs [4, 4] and [5, 4]."""
    for state in ("scheduled", "completed"):
        r0 = [entry(0, "all_reduce", [[4, 4]], [[4, 4]], state=state)]
        r1 = [entry(0, "all_reduce", [[4, 4]], [[5, 4]], state=state)]
        found = all_findings(dumps(r0, r1))
        assert [f.code for f in found] == ["CL204"], [f.message for f in found]
        assert "output sizes [[4, 4]] on rank 0" in found[0].message
        assert "rank 1 reduces input [[4, 4]] into output [[5, 4]]" in found[0].message


def test_output_dtypes_are_compared():
    """fr_trace's e9/e10: float32 in on both ranks, float16 out on one."""
    r0 = [entry(0, "all_reduce", [[4, 4]], [[4, 4]], out_dtype="Half")]
    r1 = [entry(0, "all_reduce", [[4, 4]], [[4, 4]])]
    (f,) = all_findings(dumps(r0, r1))
    assert f.code == "CL204"
    assert "output dtypes ['float16'] on rank 0" in f.message
    assert "['float32'] on rank 1" in f.message


def test_all_to_all_totals():
    """fr_trace calls a matched all_to_all UNDECIDED; the totals must still balance."""
    r0 = [entry(0, "all_to_all", [[8]], [[8]], state="started")]
    r1 = [entry(0, "all_to_all", [[8]], [[6]], state="started")]
    (f,) = all_findings(dumps(r0, r1))
    assert f.code == "CL204"
    assert "the ranks send 16 elements in total but expect to receive 14" in f.message
    assert "NCCL hangs" in f.message
    uneven = dumps(
        [entry(0, "all_to_all", [[8]], [[6]], state="started")],
        [entry(0, "all_to_all", [[4]], [[6]], state="started")],
    )
    assert all_findings(uneven) == []


def test_gather_output_exists_on_the_root_only():
    """fr_trace's e11/e12/e13: a non-root's empty output is not a mismatch."""
    r0 = [entry(0, "gather", [[4, 4]], [[4, 4], [4, 4]], state="started")]
    r1 = [entry(0, "gather", [[4, 4]], [[]], state="started", out_dtype="")]
    assert all_findings(dumps(r0, r1)) == []


def test_all_gather_and_reduce_scatter_sizes_follow_the_group_size():
    good = dumps(
        [entry(0, "all_gather", [[4]], [[8]]), entry(1, "reduce_scatter", [[8]], [[4]], seq=2)],
        [entry(0, "all_gather", [[4]], [[8]]), entry(1, "reduce_scatter", [[8]], [[4]], seq=2)],
    )
    assert all_findings(good) == []
    bad = dumps(
        [entry(0, "all_gather", [[4]], [[8]], state="started")],
        [entry(0, "all_gather", [[4]], [[12]], state="started")],
    )
    (f,) = all_findings(bad)
    assert "rank 1 gathers 4 elements from each of 2 ranks into an output of 12" in f.message


def test_coalesced_broadcasts_share_one_sequence_number():
    """fr_trace's case 3: two broadcasts and the `coalesced` marker, one seq on both ranks."""
    per_rank = [
        [
            entry(0, "broadcast", [[4, 4]], [[4, 4]], state="started"),
            entry(1, "broadcast", [[4, 4]], [[4, 4]], state="started"),
            entry(2, "coalesced", [[]], [[]], state="started"),
        ]
        for _ in range(2)
    ]
    assert all_findings(dumps(*per_rank)) == []


def test_cli_reports_the_readers_findings_at_the_source_line(tmp_path, capsys):
    import pickle

    r0 = [entry(0, "_broadcast_oop", [[4, 4]], [[4, 4]], line=41)]
    r1 = [entry(0, "_broadcast_oop", [[5, 5]], [[5, 5]], line=42)]
    for rank, dump in dumps(r0, r1).items():
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    assert load_flight_recorder(tmp_path).ranks == {0: [], 1: []}
    assert main(["plan", str(tmp_path), "--format", "concise"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("/job/train.py:41:")
    assert "CL204" in out and "All checks passed" not in out
