"""A rank whose host threads communicate: each thread is a program of its own (a lane).

Which of two threads of a rank issues first is a race the recorded order only samples; the
verdict must not depend on it. What one thread does stays in its own issue order."""

from __future__ import annotations

import itertools

from commlint.graph import check_trace
from commlint.trace import Trace


def _trace(*ranks: list[tuple[str, str, str | None]]) -> Trace:
    return Trace.model_validate(
        {
            "world_size": len(ranks),
            "groups": {"side": list(range(len(ranks))), "aux": list(range(len(ranks)))},
            "ranks": {
                r: [{"op": op, "group": g, "thread": th} for op, g, th in acts]
                for r, acts in enumerate(ranks)
            },
        }
    )


MAIN = [("all_reduce", "WORLD", None)] * 3
WORKER = [("all_reduce", "side", "worker")] * 3


def _interleavings(a: list, b: list):
    """Every merge of a and b that keeps each one's order."""
    n = len(a) + len(b)
    for picks in itertools.combinations(range(n), len(a)):
        ia, ib, out = iter(a), iter(b), []
        for k in range(n):
            out.append(next(ia) if k in picks else next(ib))
        yield out


def test_the_verdict_does_not_depend_on_how_two_threads_interleaved():
    # gloo: each thread of a rank progresses on its own (under nccl and single-queue the
    # device runs the rank's calls in the order they were enqueued, whatever the thread)
    model = "gloo"
    orders = list(_interleavings(MAIN, WORKER))
    assert len(orders) == 20
    for r0, r1 in itertools.product(orders[::3], orders[1::4]):
        result = check_trace(_trace(r0, r1), model)
        assert result.findings == [], (model, r0, r1)
        assert all(o.status == "finished" for o in result.outcomes[model].values())


def test_a_deadlock_within_one_thread_is_still_found_and_named():
    main0 = [("all_reduce", "side", None), ("all_reduce", "WORLD", None)]
    main1 = [("all_reduce", "WORLD", None), ("all_reduce", "side", None)]
    worker = [("barrier", "aux", "worker")]
    result = check_trace(_trace(main0 + worker, worker + main1), "gloo")
    assert [f.code for f in result.findings] == ["CL201"]
    assert {(a.rank, a.action) for a in result.findings[0].actions} == {(0, 0), (1, 1)}
    # the workers' barrier completed; each rank's main thread is stuck at its first call
    outcome = result.outcomes["gloo"]
    assert (outcome[0].status, outcome[0].action) == ("blocked", 0)
    assert (outcome[1].status, outcome[1].action) == ("blocked", 1)


def test_a_thread_that_blocks_does_not_stop_the_main_thread():
    # rank 1's worker waits forever on a barrier rank 0 never issues; both main threads finish
    r0 = [("all_reduce", "WORLD", None)] * 2
    r1 = [("barrier", "aux", "worker"), *r0]
    result = check_trace(_trace(r0, r1), "gloo")
    outcome = result.outcomes["gloo"]
    assert outcome[0].status == "finished"
    assert outcome[1].status == "blocked" and outcome[1].action == 0
    assert [f.code for f in result.findings] == ["CL202"]
