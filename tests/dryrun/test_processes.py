"""A dry-run's processes (issue 30 points 7 and 8): a rank is stopped only when it makes no
progress, never because it is slow on a busy machine; nothing a run starts outlives it, and
the program cannot take commlint down with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cli_server import run_commlint

ROOT = Path(__file__).resolve().parents[2]


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run(
    *args: str, cpus: set[int] | None = None, cold: bool = False, **extra: str
) -> subprocess.CompletedProcess:
    """`commlint run ARGS`, forked from the test worker's warm process (tests/cli_server.py);
    `cold`: a fresh interpreter, for a test that pins its CPUs or finds processes by the
    environment they were started with (a forked process's /proc environ is its server's)."""
    if not cpus and not cold:
        return run_commlint(["run", *args], env=env_with(**extra), timeout=300)

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    return subprocess.run(
        [sys.executable, "-m", "commlint", "run", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with(**extra),
        preexec_fn=pin,
    )


def errors(out: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in out.stderr.splitlines() if ln.startswith("commlint: error:")]


def marked(mark: str) -> list[int]:
    """Live processes that carry `mark` in their command line or environment."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            text = (
                Path(f"/proc/{pid}/cmdline").read_bytes()
                + Path(f"/proc/{pid}/environ").read_bytes()
            )
        except OSError:
            continue
        if state != "Z" and mark.encode() in text and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def gone(mark: str, within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# --- 7: progress, not wall-clock -----------------------------------------------------------


def test_a_blocked_rank_is_stopped_after_timeout_without_progress(tmp_path: Path):
    program = tmp_path / "sleeper.py"
    program.write_text(
        "import time\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    time.sleep(10**6)\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    start = time.monotonic()
    out = run("--nproc-per-node", "2", "--timeout", "3", str(program))
    assert out.returncode == 2, out.stderr
    assert time.monotonic() - start < 120
    assert errors(out) == [
        f"commlint: error: {program}:6: rank 1 did not reach the end of {program}: made no "
        "progress for 3 s (--timeout): it used no CPU time, recorded no call and waited for no "
        "peer (blocked: a sleep, a lock, input, a socket); the verdict covers only what the "
        "ranks did before"
    ]
    assert "CL202" in out.stdout


def test_an_endless_compute_loop_is_stopped_after_timeout_of_cpu(tmp_path: Path):
    program = tmp_path / "spin.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    while True:\n"
        "        pass\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    out = run("--nproc-per-node", "2", "--timeout", "3", str(program))
    assert out.returncode == 2, out.stderr
    (stop,) = errors(out)
    assert stop.startswith(f"commlint: error: {program}:") and "rank 1 did not reach" in stop
    assert "still computing after 3 s of CPU time (--timeout)" in stop


def test_a_rank_slower_than_timeout_that_keeps_computing_is_not_stopped(tmp_path: Path):
    # Rank 1 takes three times --timeout of wall-clock time, computing in bursts (a slow data
    # pipeline): it always makes progress, and its CPU time stays under the limit.
    program = tmp_path / "slow.py"
    program.write_text(
        "import time\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    end = time.monotonic() + 9\n"
        "    while time.monotonic() < end:\n"
        "        burst = time.process_time() + 0.05\n"
        "        while time.process_time() < burst:\n"
        "            pass\n"
        "        time.sleep(0.4)\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    out = run("--nproc-per-node", "2", "--timeout", "3", "--format", "json", str(program))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["findings"] == [] and errors(out) == []


def test_ranks_slowed_by_a_busy_machine_are_not_stopped(tmp_path: Path):
    # Six ranks computing at once on one CPU: each needs ~0.8 s of CPU but takes several
    # times --timeout of wall-clock time waiting for the CPU. Load is not a hang.
    program = tmp_path / "busy.py"
    program.write_text(
        "import time\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "burst = time.process_time() + 0.8\n"
        "while time.process_time() < burst:\n"
        "    pass\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    cpu = min(os.sched_getaffinity(0))
    start = time.monotonic()
    out = run(
        "--nproc-per-node", "6", "-j", "6", "--timeout", "2", "--format", "json", str(program),
        cpus={cpu},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["findings"] == [] and errors(out) == []
    assert time.monotonic() - start > 2 * 2  # the ranks did take longer than --timeout


# --- 8: process hygiene --------------------------------------------------------------------

DAEMONS = """\
import os, subprocess, sys, time
import torch.distributed as dist
dist.init_process_group('gloo')
MARK = {mark!r}
sleeper = [sys.executable, '-c', 'import time; time.sleep(600)', MARK]
# a daemon that leaves the rank's session and drops its environment (the marker with it)
subprocess.Popen(sleeper, start_new_session=True, env={{}})
# the classic double fork: setsid, fork, the middle process exits, an orphan is left
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, sleeper, {{}})
    os._exit(0)
os.waitpid(middle, 0)
time.sleep(600)
"""


@pytest.mark.parametrize(
    ("stop", "cgroup"),
    [
        (signal.SIGTERM, "1"),
        (signal.SIGTERM, "0"),
        (signal.SIGHUP, "1"),
        (signal.SIGINT, "0"),
    ],
    ids=["sigterm-cgroup", "sigterm-no-cgroup", "sighup-cgroup", "sigint-no-cgroup"],
)
def test_a_stop_signal_to_commlint_ends_every_rank_and_every_daemon(
    tmp_path: Path, stop: signal.Signals, cgroup: str
):
    mark = f"commlint-test-{uuid.uuid4().hex}"
    program = tmp_path / "daemons.py"
    program.write_text(DAEMONS.format(mark=mark))
    proc = subprocess.Popen(
        [sys.executable, "-m", "commlint", "run", "--nproc-per-node", "2", "--timeout", "120",
         str(program)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env_with(TEST_MARK=mark, COMMLINT_CGROUP=cgroup),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # commlint, 2 ranks, 2 daemons per rank (their command lines carry the mark)
        while time.monotonic() < deadline:
            daemons = [p for p in marked(mark) if mark.encode() in _cmdline(p)]
            if len(daemons) >= 4:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert len(daemons) == 4, daemons
        proc.send_signal(stop)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + stop, stderr
    assert f"commlint: error: interrupted by {stop.name}" in stderr
    assert gone(mark) == []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_rank_that_signals_its_own_process_group_cannot_kill_commlint(tmp_path: Path):
    program = tmp_path / "killpg.py"
    program.write_text(
        "import os, signal, time\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    os.killpg(0, signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "dist.barrier()\n"
    )
    out = run("--nproc-per-node", "2", str(program))
    assert out.returncode == 2, out.stderr  # commlint itself was not killed: it reports
    (stop,) = errors(out)
    assert f"rank 1 did not reach the end of {program}: killed by SIGTERM" in stop
    assert "CL210" in out.stdout or "CL202" in out.stdout


def test_a_child_left_running_neither_hangs_the_run_nor_outlives_it(tmp_path: Path):
    # A child forked by the rank holds the rank's pipe to commlint open after the rank ends;
    # a Popen child does not. Neither may turn the correct program into a stopped rank.
    mark = f"commlint-test-{uuid.uuid4().hex}"
    program = tmp_path / "leaves_children.py"
    program.write_text(
        "import os, subprocess, sys, time\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', {mark!r}])\n"
        "if os.fork() == 0:\n"
        "    time.sleep(1000)\n"
        "    os._exit(0)\n"
        "dist.barrier()\n"
    )
    out = run(
        "--nproc-per-node", "2", "--timeout", "20", str(program), cold=True, TEST_MARK=mark
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert errors(out) == [] and "killed after" not in out.stderr
    for rank in (0, 1):
        assert f"rank {rank} left 2 processes it started running; they were killed" in out.stderr
    assert gone(mark) == []
