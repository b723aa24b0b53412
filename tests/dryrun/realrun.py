"""Ground truth: run a program for real with gloo on CPU, N processes, and classify the run.

One warm parent imports torch once; each case forks its N ranks (fresh gloo state per case).
`init_process_group` and `new_group` get a short timeout so a hang turns into a timeout error;
a rank that does not finish in time is killed. The verdict comes from what the ranks did —
every rank reached the end of the script (`finished`) or not — never from a SIGABRT at exit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import runpy
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait


@dataclass
class RealRun:
    """What each rank of a real run did: `finished`, `error: …` or `hung`."""

    ranks: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(v == "finished" for v in self.ranks.values())


def _free_port() -> int:
    """A port nobody listens on now (the OS picks it): fixed formulas collided between runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(program: str, rank: int, world: int, port: int, timeout: float, conn) -> None:
    import torch.distributed as dist

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
    # pytest's faulthandler, inherited through fork, would print a crashing program's stack
    # (bad_crash_signal segfaults on purpose) into the test log; the exit code says enough.
    import faulthandler

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


def run_real(cases: list[tuple[str, int]], timeout: float = 4.0) -> dict[str, RealRun]:
    """Run each (program, nproc) for real; rank timeouts after `timeout` seconds."""
    import torch.distributed  # noqa: F401  (imported once, before forking)

    ctx = mp.get_context("fork")
    out: dict[str, RealRun] = {}
    for program, world in cases:
        port = _free_port()
        start = time.monotonic()
        procs, conns = {}, {}
        for rank in range(world):
            recv_end, send_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_rank_main, args=(program, rank, world, port, timeout, send_end))
            p.start()
            send_end.close()
            procs[rank], conns[recv_end] = p, rank
        result = RealRun()
        deadline = start + 3 * timeout + 10
        while conns and time.monotonic() < deadline:
            for c in wait(list(conns), timeout=0.2):
                rank = conns.pop(c)
                try:
                    result.ranks[rank] = c.recv()
                except EOFError:
                    result.ranks[rank] = "error: died"
        for rank, p in procs.items():
            result.ranks.setdefault(rank, "hung")
            p.join(0.5)
            if p.is_alive():
                p.kill()
                p.join()
        result.seconds = time.monotonic() - start
        out[program] = result
    return out


if __name__ == "__main__":
    for prog, run in run_real([(a, 2) for a in sys.argv[1:]]).items():
        print(f"{prog}: {'ok' if run.ok else 'BROKEN'} {run.ranks} {run.seconds:.1f}s")
