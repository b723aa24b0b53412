"""The guard on real gloo jobs: torchrun + `-m commlint.guard`, and `install()` under spawn.

Slow (real gloo jobs): marker `real`. torchrun and its workers are forked from one warm
interpreter per test worker (tests/warm_python.py: torch imported once, ~5 of a job's ~7 CPU
s before); the self-spawning program starts its own fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_python import python_command

from bench.guard_accuracy import run_program, verdicts
from bench.guard_jobs import command, job_env
from commlint.cli import main as commlint_main

pytestmark = pytest.mark.real

PROGRAM = Path(__file__).resolve().parent / "programs" / "guarded.py"
GUARD_TIMEOUT = 2.0


def _launch(args: list[str], guard: list[str] | None = None, cwd: Path | None = None):
    env = job_env(COMMLINT_GUARD_TIMEOUT=str(GUARD_TIMEOUT))
    if guard is None:
        cmd = [sys.executable, str(PROGRAM), *args]
    else:
        cmd = command(PROGRAM, args, guard=guard, python=python_command())
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=cwd)
    return proc, time.monotonic() - started


def _completed(proc: subprocess.CompletedProcess, expected: list[str]) -> bool:
    """The job did what a correct run does: rank 0's result (printed after the last
    collective, which every rank joined) and no diagnosis. The exit status alone does not
    say: a SIGABRT of a rank after its program ended is torch/gloo's shutdown race (seen
    once in ~20 runs of the suite), not the program's or the guard's."""
    if proc.stdout.splitlines() != expected:
        return False
    if any(s in proc.stderr for s in ("CL2", "hang diagnosed", "]: Traceback")):
        return False  # a diagnosis, or a rank's own exception (`[rank1]: Traceback`)
    return proc.returncode == 0 or "Signal 6 (SIGABRT)" in proc.stderr


def test_accuracy_programs_batch() -> None:
    """One labelled program of each outcome from bench/accuracy, run for real under the
    guard: the correct one exits 0 with the unguarded run's results; the hang, the failure
    and the silent corruption end non-zero, naming the line the unguarded run hung or failed
    at, within 2× the guard timeout beyond start-up."""
    ids = [
        "gpt_w2_0151",
        "ddp_w2_0005",
        "encdec_w2_0296",
        "mlp_w2_0546",
        "ddp_w2_0185",
        "encdec_w2_0116",
        "convnet_w2_0003",
    ]
    python = python_command()
    scored = verdicts([run_program(i, 3.0, python=python) for i in ids], 3.0)
    failed = [(r["id"], r["label"], r["stderr_tail"][-800:]) for r in scored["results"]]
    failed = [f for f, r in zip(failed, scored["results"], strict=True) if not r["pass"]]
    assert not failed, failed
    codes = {r["id"]: r["codes"] for r in scored["results"]}
    assert "CL201" in codes["encdec_w2_0296"]  # cross-rank send/recv order: a cycle
    assert "CL203" in codes["mlp_w2_0546"]  # a collective skipped on one rank
    assert "CL201" in codes["ddp_w2_0185"]  # DDP step on one rank: backward waits vs all_reduce
    assert "CL204" in codes["encdec_w2_0116"]  # p2p size: gloo would abort the receiver
    assert "CL204" in codes["convnet_w2_0003"]  # collective size mismatch, caught before


def test_slow_rank_is_not_killed_and_output_is_unchanged() -> None:
    plain, _ = _launch(["slow"], guard=[])
    assert _completed(plain, ["rank 0 result [8.0, 8.0, 8.0, 8.0]"]), plain.stderr[-2000:]


def test_cross_group_deadlock_is_diagnosed_and_saved(tmp_path: Path) -> None:
    proc, seconds = _launch(["order"], guard=["--save-trace", str(tmp_path)], cwd=tmp_path)
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL201 deadlock-cycle" in err, err[-3000:]
    assert "guarded.py:39" in err
    # the ranks leave on the verdict, not through an error of the wedged backend
    assert "[rank0]: Traceback" not in err and "[rank1]: Traceback" not in err
    saved = tmp_path / "commlint-guard-trace.yaml"
    assert saved.is_file()
    assert commlint_main(["plan", str(saved)]) == 1  # the plan gate finds the same cycle
    assert seconds < 120


def test_install_in_self_started_program() -> None:
    proc, _ = _launch(["--spawn", "cycle"])
    assert proc.returncode != 0
    assert "CL201 deadlock-cycle" in proc.stderr, proc.stderr[-3000:]
    assert "send(→1)" in proc.stderr and "send(→0)" in proc.stderr


def test_dtensor_functional_collectives_are_recorded_and_checked() -> None:
    """DTensor's redistributions go through functional collectives, not `dist.*`: the guard
    records them (a correct program's output is unchanged) and fingerprints them — a
    `full_tensor()` on rank 0 only meets rank 1's all_reduce, and the error names both lines."""
    plain, _ = _launch(["dtensor"], guard=[])
    assert _completed(plain, ["rank 0 result [7.0, 9.0, 11.0, 13.0]"]), plain.stderr[-2000:]
    proc, seconds = _launch(["dtensor_skip"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL203 collective-mismatch" in err, err[-3000:]
    assert "all_gather(WORLD) on rank 0 @" in err and "guarded.py:60" in err, err[-3000:]
    assert "all_reduce(WORLD) on rank 1 @" in err and "guarded.py:61" in err
    assert seconds < 120


def test_dtensor_wait_is_a_blocking_wait_in_the_diagnosis() -> None:
    """A rank blocked in a functional collective's `wait_tensor` (inside `full_tensor()`) is
    blocked at the user's line: with a peer blocked in a barrier of another group, the
    watchdog proves the cycle instead of the backend timing out."""
    proc, seconds = _launch(["dtensor_wait"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL201 deadlock-cycle" in err, err[-3000:]
    assert "all_gather(WORLD) @" in err and "guarded.py:70" in err
    assert "barrier(pg1) @" in err and "guarded.py:72" in err
    assert seconds < 120


def test_auto_check_still_catches_a_late_size_mismatch() -> None:
    """`--check auto` (the default) only publishes the fingerprints of a path seen matched
    before; the rank that leaves the path (rank 1, another line, another size, at step 6)
    waits for its peer's fingerprint and stops before gloo would abort on the sizes."""
    proc, _ = _launch(["late_size"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL204 argument-mismatch" in err, err[-3000:]
    assert "shape [8] on rank 1 @" in err and "guarded.py:79" in err
    assert "shape [4] on rank 0 @" in err and "guarded.py:81" in err
    assert "SIGABRT" not in err  # gloo never saw the mismatched sizes


def test_all_to_all_splits_that_do_not_pair_are_cl204_before_gloo_aborts() -> None:
    """Receive counts copied from the local send counts: fine for four steps of equal
    counts, wrong at step 4 (the sixth collective: rank 0 sends 3 rows to rank 1, which
    expects 2). The counts are in the fingerprint, so the changed call is compared before it
    enters — CL204 naming who sends what to whom — where gloo aborted the receiver (SIGABRT,
    "Received data size doesn't match") before the counts were fingerprinted."""
    proc, _ = _launch(["a2a_splits"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL204 argument-mismatch: all_to_all #6" in err, err[-3000:]
    assert "rank 0 sends 12 to rank 1, which expects 8" in err, err[-3000:]
    assert "guarded.py:124" in err and "SIGABRT" not in err


def test_ddp_built_on_models_of_different_sizes_is_cl204_at_the_ddp_line() -> None:
    """DDP's constructor checks the parameters' shapes across ranks (C++): torch's own error
    named no rank's size and no rule; now the constructor is one recorded broadcast whose
    fingerprint carries the parameters' total size — CL204 at the user's `DDP(...)` line."""
    proc, _ = _launch(["ddp_params"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL204 argument-mismatch: broadcast #2 on group 'WORLD' has different sizes" in err
    assert "shape [120] on rank 0 @" in err and "shape [116] on rank 1 @" in err, err[-3000:]
    assert "DDP() checks its parameters' shapes" in err and "guarded.py:116" in err


def test_auto_check_trusts_only_paths_seen_matched() -> None:
    from commlint.guard.core import _Stream

    s = _Stream()
    a, b = ("all_reduce", "[4]"), ("broadcast", "[4]")
    assert not s.trusted(a)
    s.step(a, True)  # first call, matched on every member
    assert not s.trusted(a)  # (a after a) never seen yet
    s.step(a, True)
    assert s.trusted(a)  # a after a: seen matched
    assert not s.trusted(b)
    s.step(b, False)  # b compared with only some members: not verified
    s.step(a, True)
    assert (b, a) not in s.verified


def test_ddp_buckets_are_recorded_without_a_comm_hook(tmp_path: Path) -> None:
    """DDP's bucket all-reduces (C++) are recorded at backward(), one per bucket in bucket
    order, with their sizes, none under `no_sync`: a step taken on rank 0 only while rank 1
    waits in a barrier of another group is diagnosed as a cycle at both lines."""
    proc, seconds = _launch(["ddp_extra"], guard=["--save-trace", str(tmp_path)], cwd=tmp_path)
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL201 deadlock-cycle" in err, err[-3000:]
    assert "guarded.py:96" in err, err[-3000:]  # rank 0's backward() line
    assert "guarded.py:98" in err, err[-3000:]  # rank 1's barrier
    from commlint.plans.io import load_trace

    trace = load_trace(str(tmp_path / "commlint-guard-trace.yaml")).trace
    buckets = {
        r: [a.shape for a in acts if (a.label or "").startswith("DDP gradient bucket")]
        for r, acts in trace.ranks.items()
    }
    params = 64 * 64 + 64 + 64 * 4 + 4  # one bucket holds them all (under DDP's first cap)
    assert buckets == {0: [[params]] * 4, 1: [[params]] * 3}, buckets  # none under no_sync
    assert seconds < 120


def test_ddp_forward_sync_is_a_blocking_broadcast() -> None:
    """DDP broadcasts its rebuilt bucket order (C++) in the first forward after the first
    backward: a rank blocked there is blocked in a broadcast on DDP's group, so a peer
    all-reducing on another group makes a cycle the guard proves at once (it used to wait for
    the process-group timeout: the rank looked like it was still computing)."""
    proc, seconds = _launch(["ddp_rebuild"], guard=[])
    assert proc.returncode != 0
    err = proc.stderr
    assert "CL201 deadlock-cycle" in err, err[-3000:]
    assert "all_reduce(WORLD) @" in err and "guarded.py:109" in err, err[-3000:]
    assert "broadcast(" in err and "guarded.py:110" in err, err[-3000:]
    assert "Timed out" not in err  # diagnosed before gloo's 30 s timeout
    assert seconds < 60
