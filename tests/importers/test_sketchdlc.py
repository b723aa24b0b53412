"""SketchDLC per-node parameter-server traces."""

from __future__ import annotations

import pytest
from sketchdlc_gen import write_job

from commlint import check
from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import detect_format, load_sketchdlc
from commlint.plans.importers.sketchdlc import parse_records, read_node

# Worker 0 of the paper's Figure 8 sample (Lenet-5, 2 workers, 1 server), as printed —
# including the duplicated id 16 and the one-to-many `(3-s0.)` dependency.
PAPER_WORKER0 = """\
== num_workers:= 2 num_servers:= 1 worker_hostname:= GPU-1-12 Worker_ID:= 0,1, Server_ID:= 2,
id\tsrc\tdst\tlength\tnum_pp\toperation\top_id\tdep_type\td_time\ttime_sec\ttime_usec\tid_dep
0\t0\t2\t25\t0\tOP:= SendCom_TO_Servers
1\t2\t0\t28\t0\tOP:= SendCom_To_Servers
2\t0\t2\t2042\t-15\tOP:= Push_Send_Worker\t0-0-s0\t0\t0\t1516622729\t481409\t-1
3\t2\t0\t28\t-15\tOP:= Push_Recv_Worker\t0-1-s0\t1\t13820\t1516622729\t495229\t0-0-s0
4\t0\t2\t28\t1\tOP:= Pull_Send_Worker\t0-2-s0\t2\t215080\t1516622729\t710309\t0-1-s0
5\t2\t0\t2036\t1\tOP:= Pull_Recv_Worker\t0-3-s0\t3\t969\t1516622729\t711278\t0-2-s0
16\t2\t0\t236\t4\tOP:= Pull_Recv_Worker\t3-3-s0\t3\t767\t1516622729\t722803\t3-2-s0
16\t0\t2\t28\t4\tOP:= Pull_Send_Worker\t3-2-s0\t2\t1215\t1516622729\t722036\t3-1-s0
36\t0\t2\t20033\t21\tOP:= Push_Send_Worker\t6-4-s0\t4\t70213\t1516622729\t812819\t(3-s0.)
"""


def test_paper_sample_parses(tmp_path):
    path = tmp_path / "worker_0.txt"
    path.write_text(PAPER_WORKER0)
    node = read_node(path)
    assert node.node == 0 and (node.num_workers, node.num_servers) == (2, 1)
    assert [r.id for r in node.records] == [0, 1, 2, 3, 4, 5, 16, 16, 36]
    assert [r.key for r in node.records][-3:] == [3, 3, 6]
    trace = load_sketchdlc(path)
    ops = [(a.op, a.peer, a.tag) for a in trace.ranks[0]]
    assert ops[:4] == [("isend", 2, 0), ("recv", 2, 0), ("isend", 2, 0), ("recv", 2, 0)]
    assert ops[-1][0] == "wait"
    assert trace.groups == {"workers": [0, 1], "servers": [2]}
    # the server's file is not there: the worker waits for a node that says nothing
    f = [f for f in check(trace, "gloo").findings if f.code == "CL202"]
    assert f and f[0].ranks == [0] and "rank 2" in f[0].message


def test_synchronous_job_is_clean(tmp_path):
    folder = write_job(tmp_path / "ok", workers=3, keys=4, iterations=2)
    assert detect_format(folder) == "sketchdlc"
    trace = load_sketchdlc(folder)
    assert trace.world_size == 4
    assert [f.code for f in check(trace, "all").findings] == []


def test_a_worker_that_skips_a_key_strands_the_server(tmp_path):
    folder = write_job(tmp_path / "skip", workers=2, keys=3, iterations=2, skip=(1, 1, 2))
    findings = check(load_sketchdlc(folder), "gloo").findings
    assert [f.code for f in findings] == ["CL202"]
    f = findings[0]
    assert f.ranks == [2] and "rank 1" in f.message and "tag 2" in f.message
    server = folder / "server_0.txt"
    line = next(
        n
        for n, text in enumerate(server.read_text().splitlines(), 1)
        if "Push_Recv_Server\t2-4-w1" in text
    )
    assert f.actions[0].site == f"{server}:{line}"


def test_bad_records_are_located(tmp_path):
    with pytest.raises(CommlintInputError, match="must be integers"):
        parse_records("x\t0\t2\t25\t0\tOP:= Push_Send_Worker\t0-0-s0\n", "n.txt")
    bad = tmp_path / "w.txt"
    bad.write_text("0\t0\t2\t25\t0\tOP:= Push_Send_Worker\t0-0-s0\n1\t3\t4\t8\t1\tOP:= X\n")
    with pytest.raises(CommlintInputError) as exc:
        read_node(bad)
    assert str(exc.value) == (f"{bad}:2: record 1 is between nodes 3 and 4; this file is node 0's")
    twice = write_job(tmp_path / "twice")
    (twice / "copy.txt").write_text((twice / "worker_0.txt").read_text())
    with pytest.raises(CommlintInputError, match="two files for node 0"):
        load_sketchdlc(twice)


def test_cli_forced_format_and_auto(tmp_path, capsys):
    # worker 0 skips key 1 early and goes on: it waits for key 2's ack while the server still
    # waits for its key-1 push — a cycle, with worker 1 stuck behind it
    folder = write_job(tmp_path / "skip", skip=(0, 0, 1))
    assert main(["plan", str(folder), "--format", "concise"]) == 1
    out = capsys.readouterr().out
    assert "CL201 rank 0 waits in recv(←2, tag 2)" in out
    assert "Also stuck behind it: ranks 1." in out
    assert main(["plan", str(folder), "--input-format", "sketchdlc", "--select", "CL202"]) == 0
