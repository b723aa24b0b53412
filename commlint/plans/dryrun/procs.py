"""A dry-run's processes, kept in hand: nothing outlives `commlint run`, and a rank is stopped
only when it makes no progress or computes past its limit — never because the machine is busy.

Containment, strongest first (all that the machine allows are used together):

- **a cgroup per rank** (cgroup v2, where this process may make sub-cgroups: as root, or in a
  delegated cgroup): every process a rank starts stays in its cgroup whatever it does
  (`setsid`, a double fork, a cleared environment), and `cgroup.kill` ends them all at once;
  the cgroup's `cpu.stat` and `cpu.pressure` measure the rank's work and its wait for a CPU.
  `COMMLINT_CGROUP=0` turns it off.
- **a child subreaper** (`PR_SET_CHILD_SUBREAPER`) on commlint for the run: a process orphaned
  by its parent (a daemon's double fork, a rank that ended) is re-parented to commlint, not to
  init, so it is found and killed;
- **a parent-death signal** (`PR_SET_PDEATHSIG`) on each rank: a commlint killed outright
  (SIGKILL, nothing can be run) takes its ranks with it;
- **the rank's session and an environment marker** (`SESSION_MARKER`), walked in /proc.

SIGTERM, SIGHUP and SIGINT to commlint raise `Interrupted` (`interruptible`): the run stops
every rank and everything it started before commlint leaves. Each rank is its own session
(`os.setsid` in `child.run_rank`), so `os.killpg(0, ...)` in a rank never reaches commlint.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# in every rank's environment, its pid: a process that moved to a session of its own still
# carries it (`child.run_rank`)
SESSION_MARKER = "COMMLINT_DRYRUN_SESSION"


def _prctl(option: int, arg: Any = 0) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


class Interrupted(BaseException):
    """commlint was told to stop (SIGTERM, SIGHUP, SIGINT) during a dry-run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


# why the parent stopped a rank (`child._run_program` raises with the same words, at its line)
STOP_MESSAGES = {
    "idle": "made no progress for {t:g} s (--timeout): it used no CPU time, recorded no call "
    "and waited for no peer (blocked: a sleep, a lock, input, a socket)",
    "cpu": "still computing after {t:g} s of CPU time (--timeout): a loop that does not end, "
    "or more compute than the limit",
}
# the signal the parent stops a rank with, per reason (handled in `child._run_program`)
STOP_SIGNALS = {"idle": signal.SIGALRM, "cpu": signal.SIGPROF}

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT raise `Interrupted` while the run lasts (in the main thread;
    elsewhere signals cannot be handled), so the run's cleanup runs before commlint leaves."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        for s in _STOP_SIGNALS:  # a second signal must not cut the cleanup short
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def enter_rank(parent: int, cgroup: str | None) -> None:
    """First thing in a freshly forked rank: signals as a fresh process has them (the parent's
    `interruptible` handlers are not the program's), die with commlint, join its cgroup."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for stop in STOP_SIGNALS.values():  # until the program runs (`child._run_program`)
        signal.signal(stop, signal.SIG_IGN)
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # commlint died before the signal was set
        os._exit(1)
    if cgroup:
        with contextlib.suppress(OSError):
            _write(os.path.join(cgroup, "cgroup.procs"), "0")


@dataclass
class Sample:
    """What a rank has done so far: CPU seconds (its own, and with every process it started),
    and seconds it was ready to run but waited for a CPU (the machine was busy)."""

    own_cpu: float
    cpu: float
    delay: float


class Keeper:
    """The processes of one dry-run: ranks, everything they start, and orphans re-parented
    to commlint. `close` leaves nothing running."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self.baseline = set(_children(self.me))  # commlint's children before the run
        self.rank_pids: set[int] = set()
        self._live_ranks: set[int] = set()
        self._subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self.root = _run_cgroup() if os.environ.get("COMMLINT_CGROUP", "1") != "0" else None
        self._serial = 0
        self._stale_cgroups: list[str] = []

    # --- per rank -------------------------------------------------------------------------

    def cgroup_for(self, rank: int) -> str | None:
        """A fresh cgroup for one run of `rank` (None: no cgroups here)."""
        if not self.root:
            return None
        self._serial += 1
        path = os.path.join(self.root, f"rank-{rank}-{self._serial}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        return path

    def started(self, pid: int, cgroup: str | None) -> None:
        self.rank_pids.add(pid)
        self._live_ranks.add(pid)
        if cgroup:  # as well as the rank's own write: whichever comes first
            try:
                _write(os.path.join(cgroup, "cgroup.procs"), str(pid))
            except OSError:
                if _pid_alive(pid):  # cgroups cannot hold ranks here: the other layers do
                    self.root = None

    def sample(self, pid: int, cgroup: str | None) -> Sample | None:
        """The rank's CPU time and CPU wait so far; None when /proc cannot tell."""
        stat = _stat(pid)
        if stat is None:
            return None
        own = stat[4]
        delay = _run_delay(pid)
        cpu = own
        group = _cgroup_cpu(cgroup) if cgroup else None
        if group is not None:
            cpu = max(own, group[0])
            delay = max(delay, group[1])
        else:
            for child in _descendants(pid):
                st = _stat(child)
                if st is not None:
                    cpu += st[4]
                    delay += _run_delay(child)
        return Sample(own, cpu, delay)

    def end_rank(self, pid: int, cgroup: str | None) -> int:
        """Kill the rank and every process it started (whatever session, process group or
        environment they moved to); return how many besides the rank were still running."""
        self._live_ranks.discard(pid)
        victims: set[int] = set()
        if cgroup:
            victims.update(_cgroup_procs(cgroup))
            with contextlib.suppress(OSError):
                _write(os.path.join(cgroup, "cgroup.kill"), "1")
        victims.update(_descendants(pid))
        victims.update(_in_session(pid, scan_environ=not cgroup))
        victims.discard(pid)
        _kill(victims)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        self._reap(victims)
        if cgroup:
            self._remove(cgroup)
        return len(victims)

    def abandon(self, pid: int, cgroup: str | None) -> None:
        """Stop a rank at once, without looking for what it started (`close` does)."""
        if cgroup:
            with contextlib.suppress(OSError):
                _write(os.path.join(cgroup, "cgroup.kill"), "1")
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    # --- the whole run --------------------------------------------------------------------

    def sweep(self) -> int:
        """Kill the orphans re-parented to commlint while no rank that could have started them
        runs any more (a daemon whose session and environment no longer say where it came
        from); return how many."""
        orphans = set(self._orphans())
        _kill(orphans)
        self._reap(orphans)
        return len(orphans)

    def close(self) -> None:
        """Leave nothing running: every rank, everything it started, every orphan."""
        if self.root:
            with contextlib.suppress(OSError):
                _write(os.path.join(self.root, "cgroup.kill"), "1")
        everything: set[int] = set(self._orphans())
        for pid in self.rank_pids:
            if pid in self._live_ranks:
                everything.add(pid)
            everything.update(_descendants(pid))
        everything.update(_marked(self.rank_pids))
        _kill(everything)
        for pid in self._live_ranks:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self._reap(everything - self._live_ranks)
        self._live_ranks.clear()
        if self.root:
            _wait_empty(self.root, 5.0)  # once for all (killed processes take a moment)
            for path in [*self._stale_cgroups, *_subdirs(self.root)]:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            self._remove(self.root)
        if self._subreaper:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)

    def _orphans(self) -> list[int]:
        """commlint's children that it did not start itself: re-parented to it (subreaper)."""
        return [
            p
            for p in _children(self.me)
            if p not in self.baseline and p not in self._live_ranks and p not in self.rank_pids
        ]

    def _reap(self, pids: Iterable[int]) -> None:
        """Collect the exit status of the killed processes that are commlint's own children
        (orphans re-parented to it), so none stays a zombie."""
        mine = [p for p in pids if _parent(p) == self.me]
        deadline = time.monotonic() + 2.0
        while mine and time.monotonic() < deadline:
            left = []
            for p in mine:
                try:
                    done, _ = os.waitpid(p, os.WNOHANG)
                except ChildProcessError:
                    continue
                if not done:
                    left.append(p)
            mine = left
            if mine:
                time.sleep(0.01)

    def _remove(self, cgroup: str) -> None:
        deadline = time.monotonic() + 2.0
        while True:
            try:
                os.rmdir(cgroup)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    if cgroup not in self._stale_cgroups:
                        self._stale_cgroups.append(cgroup)
                    return
                time.sleep(0.02)


def live_limit(live: int) -> int:
    """How many rank processes may be alive at once, `live` being alive now: one more while
    the machine keeps a fifth of its memory (at least 1 GiB) available. Ranks that wait for
    their peers stay alive; on one machine, memory bounds how many can."""
    avail = total = None
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    if avail is None or total is None:
        return live + 1
    return live + 1 if avail > max(1 << 30, total // 5) else live


@contextlib.contextmanager
def kept() -> Iterator[Keeper]:
    """The run's `Keeper` (reentrant: a pass inside a dry-run uses the dry-run's)."""
    if _ACTIVE:
        yield _ACTIVE[-1]
        return
    keeper = Keeper()
    _ACTIVE.append(keeper)
    try:
        yield keeper
    finally:
        _ACTIVE.pop()
        keeper.close()


_ACTIVE: list[Keeper] = []


# --- /proc and cgroup helpers -------------------------------------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _stat(pid: int) -> tuple[str, int, int, int, float] | None:
    """(state, ppid, process group, session, CPU seconds) from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
        return (
            fields[0],
            int(fields[1]),
            int(fields[2]),
            int(fields[3]),
            (int(fields[11]) + int(fields[12])) / _TICK,
        )
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def _parent(pid: int) -> int | None:
    st = _stat(pid)
    return st[1] if st else None


def _run_delay(pid: int) -> float:
    """Seconds the process was ready to run but waited for a CPU (/proc/PID/schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(f"/proc/{pid}/task/{tid}/children") as fh,
            ):
                out.extend(int(c) for c in fh.read().split())
    return out


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    seen = {pid}
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.append(p)
        todo.extend(_children(p))
    return out


def _in_session(pid: int, scan_environ: bool) -> list[int]:
    """Live processes in the rank's session or process group, or (scan_environ) carrying its
    marker in their environment."""
    marker = f"\0{SESSION_MARKER}={pid}\0".encode()
    out = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == pid:
                continue
            st = _stat(int(entry))
            if st is None or st[0] == "Z":
                continue
            if pid in (st[2], st[3]) or (scan_environ and _inherits(entry, marker)):
                out.append(int(entry))
    return out


def _marked(rank_pids: set[int]) -> list[int]:
    """Live processes carrying the marker of any of these ranks."""
    if not rank_pids:
        return []
    markers = [f"\0{SESSION_MARKER}={p}\0".encode() for p in rank_pids]
    out = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    env = b"\0" + fh.read()
            except OSError:
                continue
            if SESSION_MARKER.encode() in env and any(m in env for m in markers):
                out.append(int(entry))
    return out


def _inherits(entry: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{entry}/environ", "rb") as fh:
            return marker in b"\0" + fh.read()
    except OSError:
        return False


def _kill(pids: Iterable[int]) -> None:
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)


def _run_cgroup() -> str | None:
    """A cgroup v2 of this run's own under commlint's cgroup, or None where none can be made."""
    try:
        mount = None
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    mount = left.split()[4]
                    break
        own = None
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                if line.startswith("0::"):
                    own = line[3:].strip()
        if not mount or own is None:
            return None
        path = os.path.join(mount + own, f"commlint-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.mkdir(path)
    except OSError:
        return None
    if not os.path.exists(os.path.join(path, "cgroup.kill")):  # before Linux 5.14
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    return path


def _cgroup_procs(cgroup: str) -> list[int]:
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        return []


def _cgroup_cpu(cgroup: str) -> tuple[float, float] | None:
    """(CPU seconds of every process in the cgroup, seconds some of them waited for a CPU)."""
    try:
        with open(os.path.join(cgroup, "cpu.stat")) as fh:
            usage = next(int(ln.split()[1]) for ln in fh if ln.startswith("usage_usec"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    delay = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(os.path.join(cgroup, "cpu.pressure")) as fh:
            some = fh.readline().split()
        delay = int(some[-1].partition("=")[2]) / 1e6
    return usage / 1e6, delay


def _wait_empty(cgroup: str, seconds: float) -> None:
    """Wait until no process is left in the cgroup (`populated 0`), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(cgroup, "cgroup.events")) as fh:
                if "populated 0" in fh.read():
                    return
        except OSError:
            return
        time.sleep(0.02)


def _subdirs(path: str) -> list[str]:
    with contextlib.suppress(OSError):
        return [e.path for e in os.scandir(path) if e.is_dir()]
    return []
