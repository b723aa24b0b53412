"""Ground truth: run a program for real with gloo on CPU, N processes, and classify the run.

A fork server imports torch once; each case forks its N ranks from it (fresh gloo state per case,
and none of the test process's threads or locks: a rank forked from a busy pytest process once
hung in CI outside any gloo call).
`init_process_group` and `new_group` get a short timeout so a hang turns into a timeout error;
a rank that does not finish in time is killed. The verdict comes from what the ranks did —
every rank reached the end of the script (`finished`) or not — never from a SIGABRT at exit.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import runpy
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path


@dataclass
class RealRun:
    """What each rank of a real run did: `finished`, `error: …` or `hung`."""

    ranks: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(v == "finished" for v in self.ranks.values())


# What the programs import, imported once by the fork server instead of by every rank of every
# case (about 1.6 CPU s a rank for DDP/FSDP/DTensor): on a loaded machine a rank still importing
# held up its peer's first collective past the short timeout, and a correct program "hung".
PRELOAD = [
    "torch.distributed",
    "torch.nn.parallel",
    "torch.utils.data",
    "torch.distributed.device_mesh",
    "torch.distributed.fsdp",
    "torch.distributed.tensor.parallel",
    "torch.distributed.checkpoint",
    "torch.distributed.pipelining",
    "torch.distributed.algorithms.join",
]


def _free_port() -> int:
    """A port nobody listens on now (the OS picks it): fixed formulas collided between runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(
    program: str, rank: int, world: int, port: int, timeout: float, conn, stacks: str
) -> None:
    import faulthandler

    import torch
    import torch.distributed as dist

    # as a process torchrun starts: torch's default generator seeded from the OS (forked from
    # the forkserver, every rank would share its state)
    torch.seed()

    # A rank that never reports leaves its Python stack here, so "hung" says where.
    stack_file = open(stacks, "w")  # noqa: SIM115  (open until the process exits)
    faulthandler.dump_traceback_later(3 * timeout + 5, file=stack_file)

    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    limit = timedelta(seconds=timeout)
    init, new_group = dist.init_process_group, dist.new_group

    def init_with_timeout(*a, **k):
        k.setdefault("timeout", limit)
        return init(*a, **k)

    def new_group_with_timeout(*a, **k):
        k.setdefault("timeout", limit)
        return new_group(*a, **k)

    dist.init_process_group = init_with_timeout
    dist.new_group = new_group_with_timeout
    import torch.distributed.distributed_c10d as c10d

    c10d.new_group = new_group_with_timeout
    sys.argv = [program]
    # A crashing program's stack (bad_crash_signal segfaults on purpose) stays out of the
    # test log; the exit code says enough.
    faulthandler.disable()
    status = "finished"
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            status = f"error: exit {exc.code}"
    except BaseException as exc:
        status = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    conn.send(status)
    conn.close()
    os._exit(0)  # a wedged group can hang in destruction


class _Launch:
    """One case's ranks, forked from the server, and what each reported so far."""

    def __init__(self, ctx, program: str, world: int, timeout: float, folder: str) -> None:
        """`folder`: this case's own scratch folder. The ranks run a copy of the program there:
        a program that writes beside itself (`ok_main_process_first.py`) must not write into
        the tree that other test workers read at the same time."""
        self.program, self.stacks = program, os.path.join(folder, "stacks")
        os.makedirs(folder)
        copy = shutil.copy(program, folder)
        port = _free_port()
        self.start = time.monotonic()
        self.deadline = self.start + 3 * timeout + 10
        self.procs, self.conns = {}, {}
        self.result = RealRun()
        for rank in range(world):
            recv_end, send_end = ctx.Pipe(duplex=False)
            args = (copy, rank, world, port, timeout, send_end, f"{self.stacks}-{rank}.txt")
            p = ctx.Process(target=_rank_main, args=args)
            p.start()
            send_end.close()
            self.procs[rank], self.conns[recv_end] = p, rank

    def receive(self, conn) -> None:
        rank = self.conns.pop(conn)
        try:
            self.result.ranks[rank] = conn.recv()
        except EOFError:
            self.result.ranks[rank] = "error: died"

    @property
    def done(self) -> bool:
        return not self.conns or time.monotonic() >= self.deadline

    def finish(self) -> RealRun:
        for rank, p in self.procs.items():
            self.result.ranks.setdefault(rank, "hung" + _where(f"{self.stacks}-{rank}.txt"))
            p.join(0.5)
            if p.is_alive():
                p.kill()
                p.join()
        self.result.seconds = time.monotonic() - self.start
        return self.result


def run_real(
    cases: list[tuple[str, int]], timeout: float = 4.0, parallel: int = 3
) -> dict[str, RealRun]:
    """Run each (program, nproc) for real; rank timeouts after `timeout` seconds. Up to
    `parallel` cases run at once, each on its own port: most of a broken case's time is
    spent waiting for its timeout, not computing."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, __name__])
    scratch = tempfile.mkdtemp(prefix="commlint-realrun-")
    out: dict[str, RealRun] = {}
    waiting = list(enumerate(cases))
    live: list[_Launch] = []
    while waiting or live:
        while waiting and len(live) < parallel:
            k, (program, world) = waiting.pop(0)
            live.append(_Launch(ctx, program, world, timeout, os.path.join(scratch, str(k))))
        by_conn = {c: launch for launch in live for c in launch.conns}
        for c in wait(list(by_conn), timeout=0.2):
            by_conn[c].receive(c)
        for launch in [x for x in live if x.done]:
            live.remove(launch)
            out[launch.program] = launch.finish()
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def stop_fork_server() -> None:
    """End the fork server `run_real` started, and any rank it forked that still lives; the
    next `run_real` starts a new one. Without it the server lived as long as the test worker,
    and past it: multiprocessing asks it to leave by closing a pipe that every process forked
    from the worker since (a dry-run's ranks, their helpers) also holds open."""
    import signal
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = server._forkserver_pid
    if pid is None:
        return
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    server._stop()  # reaps it, closes its pipe and removes its socket


def _where(stacks: str) -> str:
    """' at FILE:LINE in FUNC' of the innermost frame a hung rank's stack dump names, if any."""
    try:
        text = Path(stacks).read_text()
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("File")]
    return f" ({lines[0]})" if lines else ""


if __name__ == "__main__":
    for prog, run in run_real([(a, 2) for a in sys.argv[1:]]).items():
        print(f"{prog}: {'ok' if run.ok else 'BROKEN'} {run.ranks} {run.seconds:.1f}s")
