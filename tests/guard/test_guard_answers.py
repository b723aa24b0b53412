"""`--check auto` publishes nothing for a trusted call: a peer whose call leaves the path asks
for it (`commlint.guard.answers`). Two guards of one process (ranks 0 and 1) over a real
TCPStore, each call made in its rank's own thread; the collective itself is a stand-in (rank
0's blocks, as a rank inside a real collective does)."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from commlint.guard.calls import Call
from commlint.guard.core import CommlintGuardError, Guard, Options
from commlint.guard.ring import Ring


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ranks() -> Any:
    port = _free_port()
    host = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=10))
    guards = []
    for rank in range(2):
        g = Guard(Options(timeout=5.0))
        g.ring, g.rank, g.world_size = Ring(rank), rank, 2

        def new_store(g: Guard = g) -> Any:
            client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(10))
            return dist.PrefixStore(g.prefix, client)

        g.new_store = new_store  # type: ignore[method-assign]
        from commlint.guard.answers import Answerer

        g.answerer = Answerer(g)
        g.answerer.start()
        guards.append(g)
    yield guards
    threads = [g.answerer for g in guards]
    for g in guards:
        g.local.store = g.new_store()  # this thread's client, for the stop request
        g.stop_answers()
        assert g.answerer is None
    for t in threads:  # under load an answerer may still be reading older requests
        t.join(30)  # type: ignore[union-attr]
        assert not t.is_alive()  # type: ignore[union-attr]
    del host


def all_gather(g: Guard, fn: Any = None) -> None:
    call = Call(op="all_gather", group=None, is_async=False, tensor=_T4)
    g.run(call, fn or (lambda: None), (), {}, "all_gather_single")  # the FSDP2 line


def all_reduce(g: Guard) -> None:
    call = Call(op="all_reduce", group=None, is_async=False, tensor=_T1, reduce_op="sum")
    g.run(call, lambda: None, (), {}, "all_reduce")  # the skipped step's line


class _Shape:
    def __init__(self, *shape: int) -> None:
        self.shape, self.dtype = shape, "float32"


_T4, _T1 = _Shape(4), _Shape(1)
_SOURCE = open(__file__).read().splitlines()  # noqa: SIM115
GATHER_LINE = 1 + next(i for i, x in enumerate(_SOURCE) if x.endswith("# the FSDP2 line"))
REDUCE_LINE = 1 + next(i for i, x in enumerate(_SOURCE) if x.endswith("# the skipped step's line"))


def _steps(g: Guard, n: int) -> None:
    for _ in range(n):
        all_gather(g)
        all_gather(g)
        all_reduce(g)


def _in_step(guards: list[Guard], n: int) -> None:
    """Both ranks run `n` steps, each in its own thread (a new path waits for the peer)."""
    threads = [threading.Thread(target=_steps, args=(g, n)) for g in guards]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def _names_both_lines(text: str) -> None:
    """CL203 with each rank's call at its own line (the summary's per-rank lines)."""
    assert "CL203 collective-mismatch" in text, text
    rows = [x.strip() for x in text.splitlines() if x.strip().startswith("rank ")]
    assert any(
        x.startswith("rank 0: all_gather(WORLD)")
        and x.endswith(f"test_guard_answers.py:{GATHER_LINE}")
        for x in rows
    ), text
    assert any(
        x.startswith("rank 1: all_reduce(WORLD)")
        and x.endswith(f"test_guard_answers.py:{REDUCE_LINE}")
        for x in rows
    ), text


def test_a_rank_blocked_in_a_trusted_call_answers_the_peer_that_left_the_path(
    ranks: list[Guard],
) -> None:
    """Rank 0 is inside a trusted all_gather (published nothing); rank 1 skips the step and
    calls all_reduce: its check asks, rank 0's answerer thread replies from the ring, and rank
    1 stops with CL203 naming both lines before it enters."""
    _in_step(ranks, 3)
    _rank_1_skips_while_rank_0_is_blocked(ranks)


def _rank_1_skips_while_rank_0_is_blocked(ranks: list[Guard]) -> None:
    g0, g1 = ranks
    assert g0.fp_trusted > 0 and g1.fp_trusted > 0  # the path was learned
    keys_before = g0.fp_calls
    inside = threading.Event()
    release = threading.Event()

    def blocked() -> None:
        inside.set()
        release.wait(30)

    t = threading.Thread(target=all_gather, args=(g0, blocked))
    t.start()
    assert inside.wait(10)
    assert g0.fp_calls == keys_before + 1 and g0.fp_trusted >= 1
    try:
        with pytest.raises(CommlintGuardError) as err:
            all_reduce(g1)
    finally:
        release.set()
        t.join(10)
    _names_both_lines(str(err.value))


def test_a_rank_that_gets_there_later_publishes_what_was_asked(ranks: list[Guard]) -> None:
    """Rank 1 leaves the path first and asks while rank 0 is still computing; rank 0's trusted
    all_gather, made 0.3 s later, publishes because it was asked (`Guard.wanted`)."""
    g0, g1 = ranks
    _in_step(ranks, 3)

    def late() -> None:
        time.sleep(0.3)
        all_gather(g0)

    t = threading.Thread(target=late)
    t.start()
    with pytest.raises(CommlintGuardError) as err:
        all_reduce(g1)
    t.join(10)
    _names_both_lines(str(err.value))
    assert not g0.wanted  # the note is gone once answered


def test_a_trusted_path_writes_nothing_to_the_store(ranks: list[Guard]) -> None:
    """Once the path is learned, a step adds no fingerprint (and no request) to the store."""
    g0, g1 = ranks
    _in_step(ranks, 3)
    store = g0.store()
    asked = int(store.add("fpq", 0))
    slot = g0.slot(g0.ring.next_seq["coll:WORLD"])[0]  # type: ignore[union-attr]
    key = f"fp/WORLD/{slot}/0"
    _in_step(ranks, 2)
    assert int(store.add("fpq", 0)) == asked
    assert g0.fp_trusted >= 6 and g1.fp_trusted >= 6
    # the slot of the next call still holds what an earlier round left there, if anything
    if store.check([key]):
        import json

        assert json.loads(store.get(key))["seq"] < g0.ring.next_seq["coll:WORLD"] - 6  # type: ignore[union-attr]


def test_the_request_log_stays_bounded_and_answerers_keep_up(
    ranks: list[Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each asker deletes the request `REQUESTS_KEPT` before its own (a router whose counts
    change every step asks every step); the answerers still answer the newest."""
    from commlint.guard import answers

    monkeypatch.setattr(answers, "REQUESTS_KEPT", 64)
    g0, g1 = ranks
    store = g1.store()
    for _ in range(150):  # (paced: an answerer 32 behind would skip ahead, racing deletes)
        answers.request(store, "coll:WORLD", 10_000, [0], 1)  # a call rank 0 never reaches
        time.sleep(0.005)
    assert not store.check(["fpq/1"]) and not store.check(["fpq/86"])
    assert store.check(["fpq/87"]) and store.check(["fpq/150"])
    _in_step(ranks, 3)  # the answerers read past the deleted requests: new paths still match
    assert g0.answerer.is_alive() and g1.answerer.is_alive()  # type: ignore[union-attr]
    g0.wanted.clear()  # (a note for a call rank 0 never makes, if it read those requests)
    _rank_1_skips_while_rank_0_is_blocked(ranks)  # and a divergence is still caught


def test_two_requests_for_calls_not_reached_yet_are_both_answered(ranks: list[Guard]) -> None:
    """Rank 1 asks for rank 0's next call and the one after before rank 0 makes either (two
    askers, or one asking twice): each is published when rank 0 makes it."""
    import json

    from commlint.guard import answers

    g0, g1 = ranks
    _in_step(ranks, 3)
    nxt = g0.ring.next_seq["coll:WORLD"]  # type: ignore[union-attr]
    store = g1.store()
    for seq in (nxt, nxt + 1):
        answers.request(store, "coll:WORLD", seq, [0], 1)
    deadline = time.monotonic() + 20
    while g0.wanted.get("coll:WORLD") != {nxt, nxt + 1} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert g0.wanted["coll:WORLD"] == {nxt, nxt + 1}
    trusted = g0.fp_trusted
    all_gather(g0)
    all_gather(g0)
    assert g0.fp_trusted == trusted + 2 and not g0.wanted
    for seq in (nxt, nxt + 1):
        fp = json.loads(store.get(f"fp/WORLD/{g0.slot(seq)[0]}/0"))
        assert fp["seq"] == seq and fp["op"] == "all_gather"
