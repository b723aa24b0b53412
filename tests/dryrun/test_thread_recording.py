"""Ranks whose threads communicate: recorded whole, in each thread's order, the same verdict
every run (issue 30, item 6)."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from commlint.graph.check import check_trace
from commlint.plans.dryrun.channel import PipeSend

FIXTURES = Path(__file__).parent / "fixtures"


def test_two_threads_sending_large_messages_on_one_pipe_never_interleave():
    reader, writer = multiprocessing.Pipe(duplex=False)
    send = PipeSend(writer)
    n, size = 60, 200_000  # each message needs several writes: a pipe holds 64 KiB

    def talk(name: str) -> None:
        for k in range(n):
            send((name, k, name * size))

    threads = [threading.Thread(target=talk, args=(c,)) for c in "ab"]
    for t in threads:
        t.start()
    got: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(2 * n):
        name, k, payload = reader.recv()  # an interleaved stream does not unpickle
        assert payload == name * size
        got[name].append(k)
    for t in threads:
        t.join()
    assert got == {"a": list(range(n)), "b": list(range(n))}


def test_a_side_group_worker_thread_gets_the_same_verdict_every_run():
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    program = str(FIXTURES / "side_group_thread.py")
    for _ in range(5):
        options = DryRunOptions(
            program=program, args=[], world_size=2, nproc_per_node=2, ranks=[0, 1],
            timeout=60, jobs=2,
        )  # fmt: skip
        result = dry_run(options)
        trace = result.trace(options)
        assert not trace.ends, trace.ends
        assert check_trace(trace, None).findings == []
        for r in (0, 1):
            side = [a for a in trace.ranks[r] if a.thread == "side-worker"]
            main = [a for a in trace.ranks[r] if a.thread is None]
            assert [(a.op, a.group) for a in side] == [("all_reduce", "g0_1")] * 20
            assert [(a.op, a.group) for a in main] == [("all_reduce", "WORLD")] * 20
            assert all(a.shape == [4] for a in side) and all(a.shape == [8] for a in main)
