"""A recorded call's ring entry made from a template (`commlint.guard.templates`) is the entry
`Guard.entry` and the call site give, call for call."""

from __future__ import annotations

import sys
import threading
from typing import Any

from commlint.guard.calls import Call
from commlint.guard.core import Guard, Options, _place
from commlint.guard.ring import DONE, Ring
from commlint.guard.templates import record


class _Shape:
    def __init__(self, *shape: int, dtype: str = "float32") -> None:
        self.shape, self.dtype = shape, dtype


def _guard() -> Guard:
    g = Guard(Options())
    g.ring, g.rank, g.world_size = Ring(0), 0, 2
    return g


def _slow(g: Guard, call: Call, api: str, frame: Any) -> dict[str, Any]:
    """The entry as `Guard.run` built it before templates: key by key, site walked."""
    from commlint.callsites import call_site_at
    from commlint.guard.frames import short_path

    e, _ = g.entry(call)
    _place(e, call_site_at(frame, short_path, depth=4))
    if api != e["op"]:
        e["label"] = api
    if call.is_async:
        e["handle"] = "h"
    return e


def _both(g: Guard, call: Call, api: str) -> tuple[dict[str, Any], dict[str, Any], int | None]:
    frame = sys._getframe(1)
    fast, stream, kid = record(g, call, api, frame)
    assert stream == "coll:WORLD"
    slow = _slow(g, call, api, frame)
    if "handle" in fast:
        fast["handle"] = "h"
    return fast, slow, kid


def test_template_entries_equal_the_entries_built_key_by_key() -> None:
    g = _guard()
    gather = Call(op="all_gather", group=None, is_async=False, tensor=_Shape(4, 2))
    reduce = Call(op="all_reduce", group=None, is_async=True, tensor=_Shape(8), reduce_op="max")
    seen = []
    for _ in range(3):
        fast, slow, kid = _both(g, gather, "all_gather_single")
        assert fast == slow and fast["label"] == "all_gather_single"
        seen.append((fast, kid))
        fast, slow, _ = _both(g, reduce, "all_reduce")
        assert fast == slow and "label" not in fast and fast["async"] is True
    assert len(g.templates) == 2  # one per kind of call and line
    (first, k1), (second, k2) = seen[:2]
    assert first is not second and k1 == k2 is not None
    g.ring.finish(first, DONE)  # type: ignore[union-attr]
    assert second["state"] == "pending"  # each call owns its copy


def test_what_differs_per_call_is_each_calls_own() -> None:
    g = _guard()
    ring = g.ring
    assert ring is not None
    call = Call(op="all_reduce", group=None, is_async=True, tensor=_Shape(8))
    frame = sys._getframe(0)
    outside, _, _ = record(g, call, "all_reduce", frame)
    ring.enter_backward("train.py:9")
    inside, _, _ = record(g, call, "all_reduce", frame)
    ring.leave_backward()
    assert "bwd" not in outside and inside["bwd"] == ring.backward_id
    assert outside["handle"] != inside["handle"]
    other: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: other.append(record(g, call, "all_reduce", frame)[0]))
    t.start()
    t.join()
    assert other[0]["thread"] == t.name and "thread" not in outside
    bigger = Call(op="all_reduce", group=None, is_async=True, tensor=_Shape(16))
    assert record(g, bigger, "all_reduce", frame)[0]["shape"] == [16]
    assert record(g, call, "all_reduce", frame)[0]["shape"] == [8]


def test_reduce_ops_are_named_once_per_op_and_never_confused() -> None:
    import torch.distributed as dist

    from commlint.guard.calls import reduce_name

    ops = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN, None]
    for _ in range(2):  # the second round reads the names kept by the first
        assert [reduce_name(op) for op in ops] == ["sum", "avg", "max", "min", "sum"]
