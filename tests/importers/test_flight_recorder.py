"""Flight Recorder dumps → Trace → checker; side by side with PyTorch's own fr_trace.

Two sources of dumps: real ones written by gloo on CPU (`fr_scenarios.py`, marked `real`),
and dumps built in the documented schema for the NCCL-shaped fields gloo lacks (`fr_synth`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import pickle
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fr_synth import Rank, write

from commlint import check
from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import detect_format, load_flight_recorder
from commlint.plans.importers.flight_recorder import user_frame

HERE = Path(__file__).resolve().parent
W2 = {"0": ("default_pg", [0, 1])}
W3 = {"0": ("default_pg", [0, 1, 2])}
TPDP = {"0": ("default_pg", [0, 1]), "1": ("tp", [0, 1]), "2": ("dp", [0, 1])}


def codes(trace) -> list[str]:
    return sorted(f.code for f in check(trace, None).findings)


def only(trace, code: str):
    found = [f for f in check(trace, None).findings if f.code == code]
    assert len(found) == 1, [(f.code, f.message) for f in check(trace, None).findings]
    return found[0]


def cross_group_ranks() -> tuple[Rank, Rank]:
    """Both ranks scheduled both all-reduces; rank 0's tp#1 and rank 1's dp#1 started."""
    r0 = (
        Rank(0)
        .coll("all_reduce")
        .coll("all_reduce", pg="1", desc="tp", state="started", line=50)
        .coll("all_reduce", pg="2", desc="dp", state="scheduled", line=51)
    )
    r1 = (
        Rank(1)
        .coll("all_reduce")
        .coll("all_reduce", pg="2", desc="dp", state="started", line=55)
        .coll("all_reduce", pg="1", desc="tp", state="scheduled", line=56)
    )
    return r0, r1


# --- dumps built in the schema -----------------------------------------------------------------


def test_head_to_head_sends_is_a_cycle_with_user_sites(tmp_path):
    r0 = Rank(0).coll("all_reduce").p2p("send", 0, 1, line=70)
    r1 = Rank(1).coll("all_reduce").p2p("send", 1, 0, line=74)
    trace = load_flight_recorder(write(tmp_path, [r0, r1], W2))
    assert trace.backend == "nccl"
    f = only(trace, "CL201")
    assert [(e.rank, e.op, e.site) for e in f.cycle] == [
        (0, "send(→1)", "/job/train.py:70"),
        (1, "send(→0)", "/job/train.py:74"),
    ]


def test_cross_group_order_under_nccl_async_host(tmp_path):
    """Both ranks scheduled both all-reduces (NCCL returns at once); the states say rank 0's
    tp#1 and rank 1's dp#1 started: each waits in a different group — fr_trace sees matching
    pairs, the checker sees the cycle."""
    r0, r1 = cross_group_ranks()
    trace = load_flight_recorder(write(tmp_path, [r0, r1], TPDP))
    f = only(trace, "CL201")
    assert {(e.rank, e.group, e.site) for e in f.cycle} == {
        (0, "tp", "/job/train.py:50"),
        (1, "dp", "/job/train.py:55"),
    }
    fr = trace.meta["flight_recorder"]
    assert fr["stuck_at"] == {0: "all_reduce(tp) started", 1: "all_reduce(dp) started"}
    assert fr["dropped_entries"] == {0: 1, 1: 1}  # the completed WORLD all-reduce is done


def test_completed_prefix_is_dropped_consistently_per_group(tmp_path):
    r0 = Rank(0)
    r1 = Rank(1)
    for _ in range(5):
        r0.coll("all_reduce")
        r1.coll("all_reduce")
    r0.coll("all_reduce", state="completed")  # rank 0 finished #6, rank 1 still runs it
    r1.coll("all_reduce", state="started")
    r0.coll("barrier", state="scheduled", line=90)
    trace = load_flight_recorder(write(tmp_path, [r0, r1], W2))
    # #1-#5 are done everywhere; #6 is kept on both ranks so they still line up
    assert [a.label for a in trace.ranks[0]] == ["WORLD#6 completed", "WORLD#7 scheduled"]
    assert [a.label for a in trace.ranks[1]] == ["WORLD#6 started"]
    f = only(trace, "CL202")
    assert f.ranks == [0] and "barrier" in f.message and "rank 1" in f.message


def test_keep_completed_keeps_the_whole_history(tmp_path):
    r0 = Rank(0).coll("all_reduce").coll("all_reduce", state="started")
    r1 = Rank(1).coll("all_reduce").coll("all_reduce", state="started")
    folder = write(tmp_path, [r0, r1], W2)
    assert len(load_flight_recorder(folder).ranks[0]) == 1
    assert len(load_flight_recorder(folder, keep_completed=True).ranks[0]) == 2


def test_ring_buffer_eviction_aligns_on_the_oldest_common_entry(tmp_path):
    r0, r1 = Rank(0), Rank(1)
    for k in range(4):
        r0.coll("all_reduce", state="started" if k == 3 else "completed", size=8 + k)
        r1.coll("all_reduce", state="started" if k == 3 else "completed", size=8 + k)
    r0.entries = r0.entries[2:]  # rank 0's buffer lost #1 and #2
    trace = load_flight_recorder(write(tmp_path, [r0, r1], W2), keep_completed=True)
    assert [a.shape for a in trace.ranks[0]] == [[10], [11]]
    assert [a.shape for a in trace.ranks[1]] == [[10], [11]]
    assert codes(trace) == []


def test_dtype_mismatch_names_both_sites(tmp_path):
    r0 = Rank(0).coll("all_reduce").coll("all_reduce", state="started", dtype="Float", line=80)
    r1 = Rank(1).coll("all_reduce").coll("all_reduce", state="started", dtype="BFloat16", line=81)
    trace = load_flight_recorder(write(tmp_path, [r0, r1], W2))
    f = only(trace, "CL204")
    assert "float32" in f.message and "bfloat16" in f.message
    assert {a.site for a in f.actions} == {"/job/train.py:80", "/job/train.py:81"}


def test_missing_dump_file_is_a_missing_rank(tmp_path):
    r0 = Rank(0).coll("all_reduce").coll("all_reduce", state="started", line=44)
    r1 = Rank(1).coll("all_reduce").coll("all_reduce", state="started", line=44)
    trace = load_flight_recorder(write(tmp_path, [r0, r1], W3))
    assert trace.world_size == 3
    assert trace.ends[2].message == "no Flight Recorder dump for this rank"
    f = only(trace, "CL202")
    assert f.ranks == [0, 1] and "rank 2" in f.message
    assert {a.site for a in f.actions} == {"/job/train.py:44"}


def test_batched_ring_of_p2p_completes(tmp_path):
    ranks = [Rank(i) for i in range(3)]
    for i, r in enumerate(ranks):
        r.coll("all_reduce")
        r.p2p("send", i, (i + 1) % 3, batch=True).p2p("recv", i, (i - 1) % 3, batch=True)
        r.end_batch()
    trace = load_flight_recorder(write(tmp_path, ranks, W3))
    ops = [a.op for a in trace.ranks[1]]
    assert ops == ["isend", "irecv", "wait"]
    assert trace.ranks[1][0].batch == trace.ranks[1][1].batch
    assert codes(trace) == []


def test_p2p_peer_is_mapped_from_group_local_ranks(tmp_path):
    groups = {"0": ("default_pg", [0, 1, 2, 3]), "5": ("pp", [1, 3])}
    r1 = Rank(1).p2p("send", 0, 1, pg="5", desc="pp")
    r3 = Rank(3).p2p("recv", 1, 0, pg="5", desc="pp")
    r0, r2 = Rank(0), Rank(2)
    trace = load_flight_recorder(write(tmp_path, [r0, r1, r2, r3], groups))
    assert (trace.ranks[1][0].op, trace.ranks[1][0].peer, trace.ranks[1][0].group) == (
        "send",
        3,
        "pp",
    )
    assert trace.ranks[3][0].peer == 1
    assert codes(trace) == []


def test_json_and_pickle_dumps_read_the_same(tmp_path):
    r0 = Rank(0).coll("all_reduce", state="started")
    r1 = Rank(1).coll("barrier", state="started")
    a = load_flight_recorder(write(tmp_path / "p", [r0, r1], W2))
    b = load_flight_recorder(write(tmp_path / "j", [r0, r1], W2, as_json=True))
    assert a.ranks == b.ranks
    assert codes(a) == codes(b) == ["CL203"]


def test_gloo_style_dump_without_pg_config_is_never_guessed(tmp_path):
    """Gloo leaves `pg_config` empty: the ranks that used a group are not its members."""
    r0 = Rank(0).coll("all_reduce", pg="1", desc="tp", state="scheduled")
    r1 = Rank(1).coll("all_reduce", pg="1", desc="tp", state="scheduled")
    folder = write(tmp_path, [r0, r1], {})
    with pytest.raises(CommlintInputError) as exc:
        load_flight_recorder(folder)
    assert exc.value.error.path == str(folder / "rank_0")
    message = exc.value.error.message
    assert "'1' (tp, first used by rank 0 in entry 0)" in message
    assert "--groups '{\"1\": [...]}'" in message
    given = load_flight_recorder(folder, groups={"tp": [0, 1, 2]}, world_size=3)
    assert given.groups == {"tp": [0, 1, 2]}
    assert only(given, "CL202").ranks == [0, 1]
    by_name = load_flight_recorder(folder, groups={"1": [0, 1]})
    assert by_name.groups == {"tp": [0, 1]} and codes(by_name) == []


def test_same_description_on_many_groups_gets_distinct_names(tmp_path):
    groups = {
        "0": ("default_pg", [0, 1, 2, 3]),
        "1": ("tp", [0, 1]),
        "2": ("tp", [2, 3]),
    }
    rs = [Rank(i).coll("all_reduce", pg="1" if i < 2 else "2", desc="tp") for i in range(4)]
    trace = load_flight_recorder(write(tmp_path, rs, groups), keep_completed=True)
    assert trace.groups == {"tp:1": [0, 1], "tp:2": [2, 3]}


def test_user_frame_skips_torch_and_stdlib():
    frames = [
        {"name": "all_reduce", "filename": "/x/site-packages/torch/distributed/c10d.py", "line": 1},
        {"name": "wrapper", "filename": "/x/site-packages/torch/distributed/c10d_logger.py"},
        {"name": "step", "filename": "/home/me/train.py", "line": 41},
        {"name": "run", "filename": "/usr/lib/python3.11/runpy.py", "line": 9},
        {"name": "main", "filename": "/home/me/train.py", "line": 99},
    ]
    site, stack = user_frame(frames)
    assert site == "/home/me/train.py:41"
    assert stack == ["/home/me/train.py:99 in main"]
    assert user_frame([])[0] is None


def test_bad_inputs_are_located_errors(tmp_path):
    (tmp_path / "rank_0").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(CommlintInputError, match=r"rank_0: not a Flight Recorder dump"):
        load_flight_recorder(tmp_path / "rank_0")
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "rank_0").write_bytes(pickle.dumps({"entries": [], "x": Path("/")}))
    with pytest.raises(CommlintInputError, match="refusing to load"):
        load_flight_recorder(evil / "rank_0")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CommlintInputError, match="no Flight Recorder dumps"):
        load_flight_recorder(empty)
    both = write(tmp_path / "both", [Rank(0).coll("barrier")], W2)
    write(both, [Rank(0).coll("barrier")], W2, as_json=True)
    with pytest.raises(CommlintInputError, match="two dumps for rank 0"):
        load_flight_recorder(both)


def test_a_send_to_itself_names_the_rank_file_and_trace_action(tmp_path):
    """The plan file's structural checks (importers.common.validated); the index is the
    trace action's, not the dump entry's (the completed all-reduce before it is dropped)."""
    r0 = Rank(0).coll("all_reduce").p2p("send", 0, 0, line=70)
    folder = write(tmp_path, [r0, Rank(1).coll("all_reduce")], W2)
    with pytest.raises(CommlintInputError) as exc:
        load_flight_recorder(folder)
    assert exc.value.error.path == str(folder / "rank_0")
    assert exc.value.error.message == (
        "rank 0, action 0 (/job/train.py:70): send to itself (peer 0)"
    )


def test_cli_reads_a_dump_folder(tmp_path, capsys):
    r0 = Rank(0).coll("all_reduce").p2p("send", 0, 1, line=70)
    r1 = Rank(1).coll("all_reduce").p2p("send", 1, 0, line=74)
    folder = write(tmp_path / "dumps", [r0, r1], W2)
    assert detect_format(folder) == "fr"
    assert main(["plan", str(folder), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in out["findings"]] == ["CL201"]
    # at the source line the dump names (issue 15), the dump files as related locations
    found = out["findings"][0]
    assert (found["path"], found["line"]) == ("/job/train.py", 70)
    assert {(r["path"], r["message"]) for r in found["related"]} == {
        (str(folder / "rank_0"), "rank 0: Flight Recorder entry 1"),
        (str(folder / "rank_1"), "rank 1: Flight Recorder entry 1"),
    }
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "rank_0").write_bytes(b"\x80\x04garbage entries")
    assert main(["plan", str(tmp_path / "junk"), "--input-format", "fr"]) == 2
    err = capsys.readouterr().err
    assert "junk/rank_0: not a Flight Recorder dump" in err
    assert "Traceback" not in err


# --- PyTorch's fr_trace on the same dumps --------------------------------------------------------


def fr_trace(folder: Path) -> str:
    """Run torch's analyzer in-process; its report goes to stdout and its log."""
    from torch.distributed.flight_recorder.fr_trace import main as fr_main

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    log = logging.getLogger("Flight Recorder")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            fr_main([str(folder)])
    except (AssertionError, KeyError, ValueError, NameError, SystemExit) as exc:
        buf.write(f"\n{type(exc).__name__}: {exc}")
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    return buf.getvalue()


def test_fr_trace_side_by_side_on_schema_dumps(tmp_path):
    # 1. cross-group order: fr_trace only sees a state mismatch inside each group
    r0 = (
        Rank(0)
        .coll("all_reduce", pg="1", desc="tp", state="started", line=50)
        .coll("all_reduce", pg="2", desc="dp", state="scheduled", line=51)
    )
    r1 = (
        Rank(1)
        .coll("all_reduce", pg="2", desc="dp", state="started", line=55)
        .coll("all_reduce", pg="1", desc="tp", state="scheduled", line=56)
    )
    folder = write(tmp_path / "cross", [r0, r1], TPDP)
    theirs = fr_trace(folder)
    assert "COLLECTIVE_STATE_MISMATCH" in theirs
    assert "cycle" not in theirs.lower() and "deadlock" not in theirs.lower()
    assert codes(load_flight_recorder(folder)) == ["CL201"]

    # 2. a rank without a dump: fr_trace refuses to analyse
    r0 = Rank(0).coll("all_reduce", state="started")
    r1 = Rank(1).coll("all_reduce", state="started")
    folder = write(tmp_path / "missing", [r0, r1], W3)
    assert "Missing dump files from ranks {2}" in fr_trace(folder)
    assert codes(load_flight_recorder(folder)) == ["CL202"]

    # 3. dtype: both name it
    r0 = Rank(0).coll("all_reduce", state="started", dtype="Float")
    r1 = Rank(1).coll("all_reduce", state="started", dtype="BFloat16")
    folder = write(tmp_path / "dtype", [r0, r1], W2)
    assert "COLLECTIVE_DTYPE_MISMATCH" in fr_trace(folder)
    assert codes(load_flight_recorder(folder)) == ["CL204"]

    # 4. head-to-head sends: fr_trace reports a size/syntax mismatch of the pair, no cycle
    r0 = Rank(0).p2p("send", 0, 1)
    r1 = Rank(1).p2p("send", 1, 0)
    folder = write(tmp_path / "p2p", [r0, r1], W2)
    assert "SIZE_OR_SYNTAX_MISMATCH" in fr_trace(folder)
    assert codes(load_flight_recorder(folder)) == ["CL201"]


# --- real dumps from gloo ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def real_dumps(tmp_path_factory) -> dict[str, Path]:
    """Real 2-3 rank gloo runs, one per scenario, launched from one parent (~20 s)."""
    root = tmp_path_factory.mktemp("fr_real")
    subprocess.run(
        ["nice", "-n", "10", sys.executable, str(HERE / "fr_scenarios.py"), "all", str(root),
         str(_free_port())],
        check=True, timeout=300, capture_output=True,
        env={**os.environ, "TORCH_FR_BUFFER_SIZE": "2000"},
    )  # fmt: skip
    out = {}
    for scenario in ("cross_group", "skipped_collective", "stuck_rank", "clean"):
        folder = root / scenario
        json_dir = root / f"{scenario}-json"
        json_dir.mkdir()
        for f in folder.glob("*.json"):
            f.rename(json_dir / f.name)
        out[scenario] = folder
        out[f"{scenario}-json"] = json_dir
    return out


def _line_of(text: str) -> int:
    source = (HERE / "fr_scenarios.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line)


@pytest.mark.real
def test_real_gloo_dumps(real_dumps):
    scen = str(HERE / "fr_scenarios.py")
    tp_line = _line_of("dist.all_reduce(x, group=tp)\n".strip())
    cross = load_flight_recorder(real_dumps["cross_group"])
    assert cross.backend == "gloo"
    f = only(cross, "CL201")
    assert {(e.rank, e.group) for e in f.cycle} == {(0, "tp"), (1, "dp")}
    assert f.cycle[0].site == f"{scen}:{tp_line}"  # the user's frame, not torch's

    skipped = load_flight_recorder(real_dumps["skipped_collective"])
    f = only(skipped, "CL203")
    assert "barrier" in f.message and "all_reduce" in f.message
    assert {a.rank: a.site for a in f.actions}[2] == f"{scen}:{_line_of('dist.barrier()')}"

    stuck = load_flight_recorder(real_dumps["stuck_rank"])
    f = only(stuck, "CL202")
    assert f.ranks == [0, 1] and "rank 2" in f.message
    assert "entry states not recorded" in stuck.ends[2].message  # gloo keeps `scheduled`

    assert codes(load_flight_recorder(real_dumps["clean"])) == []
    # the JSON dumps carry no stacks in torch 2.13 but the same communication
    js = load_flight_recorder(real_dumps["cross_group-json"])
    assert [a.op for a in js.ranks[0]] == [a.op for a in cross.ranks[0]]
    assert codes(js) == ["CL201"]


@pytest.mark.real
def test_real_dumps_side_by_side_with_fr_trace(real_dumps):
    theirs = fr_trace(real_dumps["cross_group"])
    # fr_trace: two unrelated "missing rank" reports, one per group; no wait-for analysis
    missing = re.findall(r"missing ranks: \{(\d)\}", theirs)
    assert sorted(missing) == ["0", "1"]
    assert "deadlock" not in theirs.lower()
    assert "COLLECTIVE_TYPE_MISMATCH" in fr_trace(real_dumps["skipped_collective"])
    assert re.search(r"missing ranks: \{2\}", fr_trace(real_dumps["stuck_rank"]))
    assert "mismatch" not in fr_trace(real_dumps["clean"]).lower()


def test_html_report_of_a_dump_folder(tmp_path):
    r0, r1 = cross_group_ranks()
    folder = write(tmp_path / "dumps", [r0, r1], TPDP)
    out = tmp_path / "hang.html"
    assert main(["plan", str(folder), "--format", "html", "-o", str(out)]) == 1
    page = out.read_text()
    assert 'data-code="CL201"' in page
    assert "2 entries (all ranks together) completed on every member" in page
    assert "rank 0: all_reduce(tp) started; rank 1: all_reduce(dp) started" in page
    assert 'data-group="tp"' in page and 'data-group="dp"' in page
    assert "tp#1 started" in page  # the entry's label in the cell's tooltip
