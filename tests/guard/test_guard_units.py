"""The guard's summary, stall report and liveness pieces, without processes of torch."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from commlint.guard.core import Options
from commlint.guard.diagnose import build_trace, mismatch_text, stall_report
from commlint.guard.liveness import identity, silent_rank
from commlint.guard.summary import format_exception


def test_a_mismatch_the_checker_cannot_word_is_still_a_coded_block() -> None:
    """DDP's forward broadcast carries no size: against a sized broadcast the checker finds
    nothing, and the guard used to raise a raw JSON dump. Now: CL204 with a line per rank."""
    seen = {
        0: {
            "op": "broadcast",
            "root": 0,
            "label": "DDP forward syncs its module buffers from rank 0",
            "site": "train.py:30",
        },
        1: {"op": "broadcast", "root": 0, "shape": [4], "dtype": "float32", "site": "train.py:41"},
    }
    text = mismatch_text("WORLD", [0, 1], 2, seen, 2)
    lines = text.splitlines()
    assert lines[0].startswith("commlint guard: CL204 argument-mismatch: collective #3"), text
    assert lines[1].startswith("  rank 0: broadcast") and "DDP forward syncs" in lines[1]
    assert lines[1].endswith("@train.py:30")
    assert lines[2].startswith("  rank 1: broadcast") and lines[2].endswith("@train.py:41")
    assert lines[-1].startswith("  fix: ") and "{" not in text


def test_a_checker_mismatch_ends_with_ranks_and_fix() -> None:
    seen = {
        0: {"op": "all_reduce", "shape": [4], "dtype": "float32", "site": "a.py:3"},
        1: {"op": "all_reduce", "shape": [8], "dtype": "float32", "site": "a.py:5"},
    }
    lines = mismatch_text("WORLD", [0, 1], 0, seen, 2).splitlines()
    assert lines[0].startswith("commlint guard: CL204 ")
    assert [ln.split(":")[0] for ln in lines[1:3]] == ["  rank 0", "  rank 1"]
    assert lines[-1].startswith("  fix: ")


def _users_call() -> None:
    Options(check="nonsense").sample_every()  # raises inside commlint


def test_tracebacks_hide_commlints_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMMLINT_GUARD_TRACEBACK", raising=False)
    try:
        _users_call()
    except ValueError as exc:
        text = format_exception(exc)
        monkeypatch.setenv("COMMLINT_GUARD_TRACEBACK", "1")
        full = format_exception(exc)
    assert "_users_call" in text and "commlint/guard/core.py" not in text
    assert text.rstrip().splitlines()[-1].startswith("ValueError: --check must be")
    assert "commlint/guard/core.py" in full


def test_stall_report_names_each_ranks_state() -> None:
    states = {
        0: {
            "status": "blocked",
            "blocked_for": 2.5,
            "inflight": {"op": "all_reduce", "group": "WORLD", "site": "t.py:18"},
        },
        1: {"status": "running", "where": ["t.py:17 in <module>", "t.py:40 in main"]},
        2: {"status": "stopped", "why": "stopped (SIGSTOP or a debugger)"},
    }
    text = stall_report(states, 2.0, 2.7, 4.0, killed=False)
    assert "rank 0 blocked for more than 2 s" in text
    assert "rank 0: blocked 2.5 s in all_reduce(WORLD) @t.py:18" in text
    assert "rank 1: running at t.py:17 in <module>" in text and "t.py:40 in main" in text
    assert "rank 2: stopped (SIGSTOP" in text
    assert "next report in 4 s" in text


def test_a_silent_rank_is_stopped_or_exited_with_its_signal_not_raised() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        info = {**identity(), "pid": child.pid}
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.2)
        assert silent_rank(info)[0] == "stopped"
        os.kill(child.pid, signal.SIGKILL)
        time.sleep(0.2)  # a zombie until reaped: its exit status is in /proc
        status, why = silent_rank(info)
        assert (status, why) == ("dead", "exited with signal 9 (SIGKILL)")
    finally:
        child.kill()
        child.wait()
    assert silent_rank({**identity(), "host": "elsewhere"})[0] == "dead"
    # the checker's words for it: an exit, not "raised"
    trace, _ = build_trace({0: {"status": "dead", "why": why}}, 1)
    assert trace.ends[0].kind == "exit" and trace.ends[0].message == why


def test_a_rank_stuck_creating_a_group_its_peer_never_creates_is_a_cycle() -> None:
    """Rank 0 creates a group with rank 1 that rank 1 never creates (it went on to an
    all_reduce): rank 0 waits in new_group's rendezvous for rank 1, which waits for rank 0."""
    from commlint.guard.diagnose import diagnose
    from commlint.guard.ring import Ring

    rings = {r: Ring(r) for r in (0, 1)}
    for ring in rings.values():
        first = ring.add({"op": "all_reduce", "group": "WORLD", "state": "pending"}, "coll:WORLD")
        ring.finish(first)
    stuck = rings[0].add(
        {
            "op": "new_group",
            "group": "WORLD",
            "label": "new_group(ranks=[0, 1])",
            "members": [0, 1],
            "site": "train.py:12",
            "state": "pending",
        },
        "create:WORLD",
    )
    rings[0].block(stuck)
    other = rings[1].add(
        {"op": "all_reduce", "group": "WORLD", "site": "train.py:20", "state": "pending"},
        "coll:WORLD",
    )
    rings[1].block(other)
    states = {}
    for r, ring in rings.items():
        snap = ring.snapshot()
        snap.update(status="blocked", inflight=dict(ring.inflight), blocked_for=3.0, groups={})
        states[r] = snap
    d = diagnose(states, 2)
    assert [f.code for f in d.hang] == ["CL201"], d.findings
    text = d.hang[0].message
    assert "barrier(new_group[0,1])" in text and "train.py:12" in text and "train.py:20" in text


def test_the_saved_mismatch_trace_gives_the_same_finding(tmp_path: Path) -> None:
    """`--save-trace` after a fingerprint mismatch: `commlint plan` on the file finds it."""
    from commlint.cli import main as commlint_main
    from commlint.guard.diagnose import mismatch_trace
    from commlint.guard.summary import save

    seen = {
        0: {"op": "all_reduce", "shape": [4], "dtype": "float32", "site": "a.py:3"},
        1: {"op": "all_reduce", "shape": [8], "dtype": "float32", "site": "a.py:5"},
    }
    path = save(str(tmp_path), mismatch_trace("WORLD", [0, 1], 0, seen, 2), ["CL204: ..."])
    assert path is not None
    assert commlint_main(["plan", path]) == 1


def test_a_failure_of_the_guards_own_recording_degrades_and_the_call_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from commlint.guard.calls import Call
    from commlint.guard.core import Guard
    from commlint.guard.ring import Ring

    guard = Guard(Options())
    guard.ring, guard.rank, guard.world_size = Ring(0), 0, 1

    def broken(call: Call) -> None:
        raise KeyError("no such group")

    monkeypatch.setattr(guard, "entry", broken)
    call = Call(op="all_reduce", group=None, is_async=False)
    assert guard.run(call, lambda x: x + 1, (41,), {}, "all_reduce") == 42
    err = capsys.readouterr().err
    assert err == "commlint guard degraded: recording failed: KeyError: 'no such group'\n"
    assert not guard.enabled  # every later call passes straight through


class _DictStore:
    """The three store calls the watchdog's stall schedule uses, over one dict."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def check(self, keys: list[str]) -> bool:
        return all(k in self.keys for k in keys)

    def get(self, key: str) -> bytes:
        return self.keys[key]

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()


def test_stall_reports_keep_one_growing_schedule_whichever_rank_coordinates(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coordinator of a round is the lowest rank that published in time — under load not
    always the same. The gap between reports doubles across coordinators (2, 4, 8 s), where a
    schedule kept per rank started again at 2 s when another rank stood in."""
    from types import SimpleNamespace

    from commlint.guard.watchdog import Watchdog

    clock = [1000.0]
    monkeypatch.setattr("commlint.guard.watchdog.time.time", lambda: clock[0])
    guard = SimpleNamespace(options=Options(timeout=2.0, kill_stalled=False))
    dogs = [Watchdog(guard, None) for _ in range(2)]  # type: ignore[arg-type]
    store = _DictStore()
    states = {0: {"status": "running", "where": []}, 1: {"status": "blocked", "blocked_for": 3}}
    printed = []
    for t, coordinator in ((0, 0), (1, 1), (2, 0), (2.1, 1), (6, 1), (7, 0), (14, 0)):
        clock[0] = 1000.0 + t
        dogs[coordinator].report_stall(store, states, 3.0)
        out = capsys.readouterr().err
        printed += [
            (t, ln.split("next report in ")[1].split()[0])
            for ln in out.splitlines()
            if "next report in" in ln
        ]
    assert printed == [(0, "2"), (2, "4"), (6, "8"), (14, "16")], printed


def test_fingerprint_texts_are_formatted_once_per_site_and_stay_exact() -> None:
    import json

    from commlint.guard.core import Guard, _fp_key

    guard = Guard(Options())
    site = {"site": "train.py:9", "stack": ["train.py:9 in step", "train.py:30 in main"]}
    calls = [
        {"op": "all_reduce", "reduce_op": "sum", "shape": [4], "dtype": "float32", **site},
        {"op": "all_reduce", "reduce_op": "sum", "shape": [4], "dtype": "float32", **site},
        {"op": "all_reduce", "reduce_op": "sum", "shape": [5], "dtype": "float32", **site},
        {"op": "all_reduce", "reduce_op": "max", "shape": [5], "dtype": "float32", **site},
        {"op": "broadcast", "root": 0, "shape": [5], "dtype": "int64", "site": "train.py:12"},
        {},
    ]
    for seq, fp in enumerate(calls * 2):
        fp = json.loads(json.dumps(fp))  # a fresh dict per call, as `fingerprint` makes
        key, text = guard.fp_text("WORLD", fp, seq)
        assert key == _fp_key(fp)
        assert text == json.dumps({**fp, "seq": seq})
        if "stack" in fp:
            fp["stack"].append("edited later by the caller")  # must not change what is cached
    assert len(guard.fp_texts) == 3  # one per (group, site)
    # a caller that edits its fingerprint after formatting it: the cache keeps what it formatted
    fp = {"op": "barrier", "site": "train.py:40", "stack": ["train.py:40 in main"]}
    guard.fp_text("WORLD", fp, 100)
    fp["stack"].append("train.py:50 in run")
    later = {"op": "barrier", "site": "train.py:40", "stack": fp["stack"][:]}
    assert guard.fp_text("WORLD", later, 101)[1] == json.dumps({**later, "seq": 101})
