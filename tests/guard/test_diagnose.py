"""The guard's verdict from rank snapshots: trace cut, checker findings, what counts as a hang.

No processes: snapshots are written the way `Ring.snapshot` and the watchdog write them."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from commlint.cli import main as commlint_main
from commlint.guard.__main__ import parser, split
from commlint.guard.core import Options
from commlint.guard.diagnose import build_trace, diagnose, format_report, mismatch_text
from commlint.guard.ring import Ring
from commlint.plans.io import dump_trace, loads_trace


def _ring(rank: int, calls: list[dict], size: int = 512) -> Ring:
    """A ring with `calls` recorded; the last one left pending (blocked in it) if asked."""
    ring = Ring(rank, size)
    for c in calls:
        c = dict(c)
        key = c.pop("key", None)
        pending = c.pop("pending", False)
        e = ring.add({**c, "state": "pending"}, key)
        if pending:
            ring.block(e)
        else:
            ring.finish(e)
    return ring


def _state(ring: Ring, status: str | None = None) -> dict:
    snap = ring.snapshot()
    inflight = ring.inflight
    snap["status"] = status or ("blocked" if inflight else "running")
    snap["inflight"] = dict(inflight) if inflight else None
    snap["blocked_for"] = 3.2
    snap["groups"] = {}
    return snap


def _ar(site: str, pending: bool = False, n: int = 4) -> dict:
    return {
        "op": "all_reduce",
        "group": "WORLD",
        "shape": [n],
        "dtype": "float32",
        "reduce_op": "sum",
        "site": site,
        "key": "coll:WORLD",
        "pending": pending,
    }


def _send(me: int, peer: int, site: str, pending: bool = False) -> dict:
    return {
        "op": "send",
        "group": "WORLD",
        "peer": peer,
        "site": site,
        "key": f"p2p:WORLD:{me}>{peer}:0",
        "pending": pending,
    }


def test_send_send_cycle_is_a_hang_naming_both_sites() -> None:
    r0 = _ring(0, [_ar("t.py:5"), _send(0, 1, "t.py:10", pending=True)])
    r1 = _ring(1, [_ar("t.py:5"), _send(1, 0, "t.py:12", pending=True)])
    d = diagnose({0: _state(r0), 1: _state(r1)}, 2)
    assert [f.code for f in d.hang] == ["CL201"]
    assert "t.py:10" in d.hang[0].message and "t.py:12" in d.hang[0].message
    report = format_report(d, {0: _state(r0), 1: _state(r1)}, 3.0)
    assert "rank 0: blocked 3.2 s in send(→1) @t.py:10" in report


def test_a_rank_still_running_is_not_killed() -> None:
    # rank 0 waits in all_reduce #2; rank 1 is computing (slow, not stuck): no verdict yet
    r0 = _ring(0, [_ar("t.py:5"), _ar("t.py:9", pending=True)])
    r1 = _ring(1, [_ar("t.py:5")])
    d = diagnose({0: _state(r0), 1: _state(r1)}, 2)
    assert d.hang == []
    assert any(f.code == "CL202" for f in d.findings)  # the checker sees the wait, unproven


def test_a_finished_rank_strands_its_peer() -> None:
    r0 = _ring(0, [_ar("t.py:5"), _ar("t.py:9", pending=True)])
    r1 = _ring(1, [_ar("t.py:5")])
    ended = r1.snapshot()
    ended["status"] = "ended"
    ended["end"] = {"kind": "exit", "message": "exit code 3", "site": "t.py:7"}
    d = diagnose({0: _state(r0), 1: ended}, 2)
    assert [f.code for f in d.hang] == ["CL210"]
    assert "t.py:7" in d.hang[0].message and "t.py:9" in d.hang[0].message


def test_a_dead_rank_is_named() -> None:
    r0 = _ring(0, [_ar("t.py:5"), _ar("t.py:9", pending=True)])
    states = {0: _state(r0), 1: {"status": "dead", "why": "heartbeat stopped"}}
    d = diagnose(states, 2)
    assert [f.code for f in d.hang] == ["CL210"]
    assert "heartbeat stopped" in d.hang[0].message
    assert "rank 1: heartbeat stopped" in format_report(d, states, 3.0)


def test_rings_truncated_differently_still_line_up() -> None:
    # rank 0 keeps only its last 3 calls, rank 1 all 11: the cut keeps the common tail, so
    # all_reduce #10 (both issued, both done) pairs up and the barrier/all_reduce mismatch
    # at #11 is what the checker sees — not a misalignment by 8 calls.
    calls0 = [_ar(f"t.py:{i}") for i in range(10)] + [
        {"op": "barrier", "group": "WORLD", "site": "t.py:50", "key": "coll:WORLD", "pending": True}
    ]
    calls1 = [_ar(f"t.py:{i}") for i in range(10)] + [_ar("t.py:60", pending=True)]
    r0, r1 = _ring(0, calls0, size=3), _ring(1, calls1)
    trace, _ = build_trace({0: _state(r0), 1: _state(r1)}, 2)
    assert len(trace.ranks[0]) == 3 and len(trace.ranks[1]) == 3
    d = diagnose({0: _state(r0), 1: _state(r1)}, 2)
    assert [f.code for f in d.hang] == ["CL203"]
    assert "t.py:50" in d.hang[0].message and "t.py:60" in d.hang[0].message


def test_an_old_silent_mismatch_does_not_stop_a_progressing_job() -> None:
    # all_reduce #1 paired shapes [4] and [8] silently long ago (gloo allows it); now rank 0
    # waits and rank 1 computes: that old finding is no proof of a hang now.
    r0 = _ring(0, [_ar("t.py:5", n=4), _ar("t.py:9", pending=True)])
    r1 = _ring(1, [_ar("t.py:5", n=8)])
    d = diagnose({0: _state(r0), 1: _state(r1)}, 2)
    assert any(f.code == "CL204" for f in d.findings)
    assert d.hang == []


def test_saved_trace_is_read_by_plan_and_replay(tmp_path: Path, capsys) -> None:
    r0 = _ring(0, [_ar("t.py:5"), _send(0, 1, "t.py:10", pending=True)])
    r1 = _ring(1, [_ar("t.py:5"), _send(1, 0, "t.py:12", pending=True)])
    d = diagnose({0: _state(r0), 1: _state(r1)}, 2)
    saved = tmp_path / "commlint-guard-trace.yaml"
    dump_trace(d.trace, saved)
    again = loads_trace(saved.read_text())
    assert again.ranks[0][-1].site == "t.py:10"
    assert again.source == "guard"
    assert commlint_main(["plan", str(saved)]) == 1
    assert "CL201" in capsys.readouterr().out
    repro = tmp_path / "repro.py"
    assert commlint_main(["replay", str(saved), "-o", str(repro)]) in (0, 1)
    assert "send" in repro.read_text()


def test_async_op_and_its_wait_are_kept_together() -> None:
    ring = Ring(0)
    op = ring.add(
        {"op": "irecv", "group": "WORLD", "peer": 1, "async": True, "handle": "r0h1"},
        "p2p:WORLD:1>0:0",
    )
    op["state"] = "pending"
    w = ring.add({"op": "wait", "handles": ["r0h1"], "state": "pending", "site": "t.py:3"}, None)
    ring.block(w)
    r1 = _ring(1, [_ar("t.py:8", pending=True)])
    d = diagnose({0: _state(ring), 1: _state(r1)}, 2)
    assert [a.op for a in d.trace.ranks[0]] == ["irecv", "wait"]
    assert [f.code for f in d.hang] == ["CL201"]


def test_mismatch_text_is_the_checkers_with_the_real_call_number() -> None:
    seen = {
        0: {"op": "all_reduce", "shape": [4], "dtype": "float32", "site": "a.py:3"},
        1: {"op": "barrier", "site": "a.py:9"},
    }
    text = mismatch_text("WORLD", [0, 1], 6, seen, 2)
    assert "CL203" in text and "#7 on group 'WORLD'" in text
    assert "a.py:3" in text and "a.py:9" in text
    seen[1] = {"op": "all_reduce", "shape": [5], "dtype": "float32", "site": "a.py:3"}
    assert "CL204" in mismatch_text("pg2", [0, 1], 0, seen, 2)


def test_options() -> None:
    assert Options(check="sample:5").sample_every() == 5
    assert Options(check="off").sample_every() == 0
    with pytest.raises(ValueError):
        Options(check="sample:0").sample_every()


def test_options_are_parsed_by_a_real_parser_and_the_program_keeps_its_own() -> None:
    options, rest = split(["--timeout", "2", "--check=sample:3", "train.py", "--lr", "1"])
    opts = parser().parse_args(options)
    assert (opts.timeout, opts.check, opts.module) == (2.0, "sample:3", None)
    assert rest == ["train.py", "--lr", "1"]
    options, rest = split(["--kill-stalled", "-m", "pkg.train", "--timeout", "9"])
    opts = parser().parse_args(options)
    assert opts.module == "pkg.train" and opts.kill_stalled and opts.timeout is None
    assert rest == ["--timeout", "9"]  # the module's own arguments, untouched
    with pytest.raises(SystemExit):
        parser().parse_args(["--bogus"])


def test_help_and_module_run(tmp_path: Path) -> None:
    """`--help` is the guard's (its options, -m, where torchrun's go); `-m module` runs the
    module as `python -m` does, with its arguments."""
    run = functools.partial(
        subprocess.run, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    helped = run([sys.executable, "-m", "commlint.guard", "--help"])
    assert helped.returncode == 0
    for flag in ("--timeout", "--check", "--save-trace", "--kill-stalled", "-m MODULE"):
        assert flag in helped.stdout, helped.stdout
    (tmp_path / "tool.py").write_text("import sys\nprint('args', sys.argv[1:], __name__)\n")
    ran = run([sys.executable, "-m", "commlint.guard", "-m", "tool", "--timeout", "3"])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "args ['--timeout', '3'] __main__"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--bogus", "x.py"], "unrecognized arguments: --bogus"),
        (["--timeout", "abc", "x.py"], "--timeout: must be a positive number"),
        (["-m", "no_such_module_here"], "no module named 'no_such_module_here'"),
        (["--check", "sample:0", "x.py"], "--check must be auto, all, sample:N"),
        (["missing.py"], "missing.py: no such file"),
    ],
)
def test_bad_invocation_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], says: str) -> None:
    (tmp_path / "x.py").write_text("print('never runs')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "commlint.guard", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert "never runs" not in proc.stdout
