"""Opt-in CPU accounting per test: `COMMLINT_TEST_CPU=<file> python -m pytest ...`.

Wall time is no measure on a shared machine; CPU seconds are. For every test this records
the CPU (user + system) of its pytest process and of the children it waited for (a child's
CPU only reaches RUSAGE_CHILDREN once it is reaped), over setup, call and teardown — so a
module-scoped fixture's cost lands on the first test that needs it. Processes that outlive a
test (multiprocessing's forkserver, which reaps the ranks it forks) are counted by the change
of their own CPU and their reaped children's, read from /proc: without it a real gloo batch's
ranks would count nowhere. Each xdist worker
appends JSON lines to the file; the controller prints the top consumers at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "COMMLINT_TEST_CPU"
TOP = 40


_TICK = os.sysconf("SC_CLK_TCK")


def _live_descendants_cpu() -> float:
    """CPU seconds of this process's living descendants, each with its reaped children's."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        # after the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / _TICK
    me, total = os.getpid(), 0.0
    for pid in cpu:
        p, seen = parent.get(pid), 0
        while p is not None and p > 1 and seen < 64:
            if p == me:
                total += cpu[pid]
                break
            p, seen = parent.get(p), seen + 1
    return total


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + _live_descendants_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator:
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    own0, kids0 = _cpu()
    yield
    own1, kids1 = _cpu()
    row = {"test": item.nodeid, "self": round(own1 - own0, 3), "children": round(kids1 - kids0, 3)}
    row["outcome"] = getattr(item, "_cpu_profile_outcome", "passed")
    row["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    report = (yield).get_result()
    if report.failed:
        item._cpu_profile_outcome = "failed"  # type: ignore[attr-defined]
    elif report.skipped and not hasattr(item, "_cpu_profile_outcome"):
        item._cpu_profile_outcome = "skipped"  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    path = os.environ.get(ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not Path(path).exists():
        return
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["total"] = row["self"] + row["children"]
    rows.sort(key=lambda r: -r["total"])
    total = sum(r["total"] for r in rows)
    by_file: dict[str, float] = {}
    for row in rows:
        key = row["test"].split("::")[0]
        by_file[key] = by_file.get(key, 0.0) + row["total"]
    terminalreporter.section(f"CPU seconds per test ({ENV}={path})")
    terminalreporter.write_line(f"{len(rows)} tests, {total:.1f} CPU s in tests")
    for row in rows[:TOP]:
        terminalreporter.write_line(
            f"{row['total']:8.1f} s (self {row['self']:6.1f}, children {row['children']:6.1f})"
            f"  {row['test']}"
        )
    terminalreporter.write_line("per file:")
    for key, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{cpu:8.1f} s  {key}")


def _reap_leftovers(grace: float = 5.0) -> int:
    """Reap what the command orphaned onto this subreaper; what still lives after `grace`
    seconds (a forkserver and ranks a test never shut down) is killed and counted."""
    import signal
    import time

    deadline = time.monotonic() + grace
    killed = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid:
            continue
        if time.monotonic() < deadline:
            time.sleep(0.1)
            continue
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                with contextlib.suppress(OSError):  # what it was, to find the test that leaked it
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
                    print(f"cpu_profile: leftover {entry.name}: {cmd}", flush=True)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
        deadline = time.monotonic() + grace  # killed: wait for them (and any they orphaned)


def main(argv: list[str]) -> int:
    """`python tests/cpu_profile.py CMD...`: run CMD as a child subreaper, so processes it
    orphans (a forkserver its workers never waited for) are reaped here and their CPU
    counted; print the whole tree's CPU, the wall time and the load average before and after."""
    import ctypes
    import subprocess
    import time

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)
    load0, start = os.getloadavg(), time.monotonic()
    code = subprocess.call(argv)
    wall = time.monotonic() - start
    left = _reap_leftovers()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"cpu_profile: wall {wall:.0f} s ({int(wall // 60)} min {wall % 60:.0f} s), CPU "
        f"{kids.ru_utime + kids.ru_stime:.0f} s ({kids.ru_utime:.0f} user + "
        f"{kids.ru_stime:.0f} sys), load average {load0[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after, exit {code}"
        + (f"; {left} leftover processes killed (a test leaked them)" if left else ""),
        flush=True,
    )
    return code


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
