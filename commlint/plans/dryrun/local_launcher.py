"""The local launcher: rank processes forked from this warm process (torch and the warm-up's
caches already loaded, the heap frozen), a pipe each way per rank, every process kept in hand
by `procs.Keeper`. Also what a Ray node's agent runs (`ray_launcher.NodeAgent`)."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from typing import Any

from commlint.plans.dryrun import procs
from commlint.plans.dryrun.child import RankSpec, run_rank
from commlint.plans.dryrun.launch import Ended, Event, Launcher, NodeUsage
from commlint.plans.dryrun.values import ValueTable


@dataclass
class _Proc:
    """A rank process and its two pipes."""

    rank: int
    proc: Any
    conn: Any  # the rank's messages
    reply: Any  # answers to its questions (`channel.Live`)
    cgroup: str | None
    exit_fd: int  # readable once the process ended (`_exit_fd`)


def _exit_fd(proc: Any) -> int:
    """A descriptor that becomes readable when the rank's process ends: a pidfd. Not the
    process's sentinel, nor its pipe: both are pipes a child it forked inherits and keeps
    open after the rank ended."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # before Linux 5.3
        return proc.sentinel


def _rank_main(spec: RankSpec, table: ValueTable, conn: Any, replies: Any, parent: int,
               cgroup: str | None) -> None:  # fmt: skip
    procs.enter_rank(parent, cgroup)
    run_rank(spec, table, conn, replies)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


class LocalLauncher(Launcher):
    """Ranks forked on this machine."""

    name = "local"

    def __init__(self) -> None:
        self._ctx = mp.get_context("fork")
        self._stack = contextlib.ExitStack()
        self.keeper: procs.Keeper | None = None
        self.scratch = ""
        self._table = ValueTable()
        self._running: dict[int, _Proc] = {}
        self._by_fd: dict[Any, _Proc] = {}  # a pipe or an exit descriptor -> its rank
        self._started = 0
        self._cpu_before = 0.0

    def open(self, mode: str) -> None:
        from commlint.plans.dryrun.warm import warm_up

        warm_up(mode)
        # Every object this process holds (torch's modules, the warm caches) out of the
        # garbage collector's reach while ranks are forked: a child's collections then scan
        # only its own objects and never touch (and copy) the parent's pages (~15-20 % of a
        # rank's CPU).
        gc.collect()
        gc.freeze()
        self._stack.callback(gc.unfreeze)
        self.scratch = tempfile.mkdtemp(prefix="commlint-dryrun-")
        self._stack.callback(shutil.rmtree, self.scratch, True)
        self.keeper = self._stack.enter_context(procs.kept())  # nothing outlives the run
        self._cpu_before = _children_cpu()

    def close(self) -> None:
        self._stack.close()

    def begin(self, table: ValueTable, mode: str) -> None:
        self._table = table

    def can_start(self, live: int) -> bool:
        return live < procs.live_limit(live)

    def start(self, spec: RankSpec) -> None:
        assert self.keeper is not None
        rank = spec.rank
        spec = replace(
            spec,
            output=os.path.join(self.scratch, f"rank-{rank}.out"),
            fault=os.path.join(self.scratch, f"rank-{rank}.fault"),
        )
        recv_end, send_end = self._ctx.Pipe(duplex=False)
        reply_recv, reply_send = self._ctx.Pipe(duplex=False)
        cgroup = self.keeper.cgroup_for(rank)
        # Not a daemon: a rank may start processes of its own (DataLoader workers); it and
        # they are killed together when it ends or overruns (`procs.Keeper`).
        proc = self._ctx.Process(
            target=_rank_main,
            args=(spec, self._table, send_end, reply_recv, os.getpid(), cgroup),
            daemon=False,
        )
        proc.start()
        self.keeper.started(proc.pid, cgroup)
        send_end.close()
        reply_recv.close()
        p = _Proc(rank, proc, recv_end, reply_send, cgroup, _exit_fd(proc))
        self._running[rank] = p
        self._by_fd[recv_end] = self._by_fd[p.exit_fd] = p
        self._started += 1

    def wait(self, timeout: float) -> list[Event]:
        events: dict[int, Event] = {}
        for ready in wait(list(self._by_fd), timeout=timeout):
            # a pipe with messages (or closed); or a rank process that ended, though a
            # process it forked may still hold its pipe open: what it sent is all there
            p = self._by_fd.get(ready)
            if p is None or p.rank not in self._running:
                continue
            event = events.setdefault(p.rank, Event(p.rank, []))
            if event.ended:
                continue
            over = ready is not p.conn
            try:
                while p.conn.poll():
                    event.messages.append(p.conn.recv())
            except (EOFError, OSError):
                over = True
            if over:
                event.ended = self._end(p)
        return list(events.values())

    def reply(self, rank: int, value: Any) -> None:
        p = self._running.get(rank)
        if p is not None:
            with contextlib.suppress(OSError):
                p.reply.send(value)

    def sample(self, rank: int) -> procs.Sample | None:
        p = self._running.get(rank)
        if p is None or self.keeper is None:
            return None
        return self.keeper.sample(p.proc.pid, p.cgroup)

    def stop(self, rank: int, signum: int) -> None:
        p = self._running.get(rank)
        if p is not None:
            with contextlib.suppress(OSError):
                os.kill(p.proc.pid, signum)

    def kill(self, rank: int) -> Ended:
        p = self._running[rank]
        assert self.keeper is not None
        self.keeper.end_rank(p.proc.pid, p.cgroup)
        return self._end(p)

    def _end(self, p: _Proc) -> Ended:
        """Collect an ended (or killed) rank: what it started and left running goes with it
        (a child holding its pipe too)."""
        assert self.keeper is not None
        self._running.pop(p.rank, None)
        self._by_fd.pop(p.conn, None)
        if self._by_fd.pop(p.exit_fd, None) is not None and p.exit_fd != p.proc.sentinel:
            os.close(p.exit_fd)
        with contextlib.suppress(OSError):
            p.reply.close()
        p.proc.join(1.0)
        if p.proc.is_alive():
            self.keeper.end_rank(p.proc.pid, p.cgroup)
            p.proc.join()
        leftover = self.keeper.end_rank(p.proc.pid, p.cgroup)
        p.conn.close()
        return Ended(
            exitcode=p.proc.exitcode,
            leftover=leftover,
            output=_read(os.path.join(self.scratch, f"rank-{p.rank}.out")),
            fault=_read(os.path.join(self.scratch, f"rank-{p.rank}.fault")),
            debug=self._debug_notes(p.rank),
        )

    def _debug_notes(self, rank: int) -> dict[str, bytes]:
        """`COMMLINT_DEBUG=1`: a rank's exception tracebacks, written into the scratch (its
        view of the working folder is its own); the driver appends them to the working
        folder's file."""
        out = {}
        for mode in ("fake", "real"):
            name = f"commlint-debug-rank{rank}-{mode}.txt"
            path = os.path.join(self.scratch, name)
            with contextlib.suppress(OSError):
                with open(path, "rb") as src:
                    out[name] = src.read()
                os.remove(path)
        return out

    def abandon(self) -> None:
        assert self.keeper is not None
        for p in self._running.values():  # `Keeper.close`: the rest
            self.keeper.abandon(p.proc.pid, p.cgroup)
        for p in self._running.values():
            with contextlib.suppress(Exception):
                p.proc.join(1.0)

    def end_pass(self, clean: bool) -> None:
        if clean and self.keeper is not None:
            self.keeper.sweep()

    def live(self) -> list[int]:
        """The ranks running now."""
        return list(self._running)

    def pids(self) -> list[int]:
        return [p.proc.pid for p in self._running.values()]

    def usage(self) -> list[NodeUsage]:
        import resource
        import socket

        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        cpu = _children_cpu() - self._cpu_before
        return [NodeUsage(socket.gethostname(), self._started, cpu, peak)]


def _children_cpu() -> float:
    """CPU seconds of this process's collected children (the ranks, and what they
    started and collected)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
