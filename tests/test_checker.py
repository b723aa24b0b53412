"""Semantics of the checker: matching, queue models, verdicts, cycle reporting."""

from __future__ import annotations

from commlint.graph import check_trace
from commlint.plans.io import loads_trace
from commlint.report.text import draw_cycle
from commlint.trace import Action, Trace


def codes(result):
    return sorted(f.code for f in result.findings)


def test_cycles_reported_smallest_first_with_sites():
    # ranks 0<->1 form a 2-cycle; 2 -> 3 -> 4 -> 2 a 3-cycle through three groups
    trace = loads_trace("""
version: 1
world_size: 5
groups: {a: [2, 3], b: [3, 4], c: [2, 4]}
ranks:
  0: [{op: send, peer: 1, site: "x.py:1"}]
  1: [{op: send, peer: 0, site: "x.py:2"}]
  2: [{op: all_reduce, group: a, site: "y.py:1"}, {op: all_reduce, group: c}]
  3: [{op: all_reduce, group: b, site: "y.py:2"}, {op: all_reduce, group: a}]
  4: [{op: all_reduce, group: c, site: "y.py:3"}, {op: all_reduce, group: b}]
""")
    result = check_trace(trace)
    cycles = [f.cycle for f in result.findings if f.code == "CL201"]
    assert [len(c) for c in cycles] == [2, 3]
    assert [e.rank for e in cycles[1]] == [2, 3, 4]
    assert [e.waits_for for e in cycles[1]] == [3, 4, 2]
    assert draw_cycle(cycles[1]) == (
        "rank 2 ─all_reduce(a) @y.py:1─▶ rank 3 ─all_reduce(b) @y.py:2─▶ "
        "rank 4 ─all_reduce(c) @y.py:3─▶ rank 2"
    )


def test_every_elementary_cycle_and_the_cap():
    # 4 ranks all blocked in sends to every other rank's channel: many elementary cycles
    trace = loads_trace("""
version: 1
world_size: 3
groups: {a: [0, 1, 2]}
ranks:
  0: [{op: all_reduce, group: a}]
  1: [{op: all_reduce, group: WORLD}]
  2: [{op: barrier, group: a}]
""")
    full = check_trace(trace)
    assert {f.code for f in full.findings} >= {"CL203"}
    # each rank first enters a collective on "its own" group of all ranks: a complete
    # wait-for graph, with 2-, 3-, … 6-cycles
    ring = Trace(
        world_size=6,
        groups={f"g{k}": list(range(6)) for k in range(6)},
        ranks={
            r: [Action(op="all_reduce", group=f"g{(r + k) % 6}") for k in range(6)]
            for r in range(6)
        },
    )
    capped = check_trace(ring, max_cycles=3)
    dl = [f for f in capped.findings if f.code == "CL201"]
    assert len(dl) == 3 and "More than 3 elementary cycles" in dl[-1].message
    assert all(len(f.cycle) == 2 for f in dl)


def test_long_ring_message_is_abridged_but_json_keeps_every_edge():
    w = 200
    ring = Trace(
        world_size=w,
        ranks={
            r: [Action(op="send", peer=(r + 1) % w), Action(op="recv", peer=(r - 1) % w)]
            for r in range(w)
        },
    )
    (f,) = check_trace(ring).findings
    assert len(f.cycle) == w
    assert "194 more ranks wait the same way" in f.message and len(f.message) < 600
    assert "… 194 more" in draw_cycle(f.cycle)


def test_queue_models_differ_on_unbatched_exchange():
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: isend, peer: 1, handle: s}, {op: irecv, peer: 1, handle: r}, {op: wait, handles: [s, r]}]
  1: [{op: isend, peer: 0, handle: s}, {op: irecv, peer: 0, handle: r}, {op: wait, handles: [s, r]}]
""")
    result = check_trace(trace, "all")
    assert result.blocked("gloo") == []
    # NCCL: isend and irecv to one peer share a communicator and run in issue order
    assert result.blocked("nccl") == [0, 1] and result.blocked("single-queue") == [0, 1]
    batched = trace.model_copy(deep=True)
    for actions in batched.ranks.values():
        for a in actions[:2]:
            a.batch = "b"  # one batch_isend_irecv
    assert check_trace(batched, "all").findings == []


def test_nccl_barrier_pairs_with_one_element_all_reduce():
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: barrier}]
  1: [{op: all_reduce, shape: [1]}]
""")
    assert codes(check_trace(trace, "gloo")) == ["CL203"]
    assert check_trace(trace, "nccl").findings == []


def test_sync_waits_for_outstanding_ops_under_nccl_only():
    trace = loads_trace("""
version: 1
world_size: 2
groups: {g: [0, 1]}
ranks:
  0: [{op: all_reduce, group: g, async: true, handle: a}, {op: sync}, {op: barrier}]
  1: [{op: barrier}, {op: all_reduce, group: g, async: true, handle: a}, {op: wait, handles: [a]}]
""")
    result = check_trace(trace, "all")
    assert result.blocked("gloo") == [] and codes(result)
    assert result.blocked("nccl") == [0, 1]


def test_nccl_stream_order_on_one_group():
    # two async all_reduces on one group, waited in the opposite order: still fine (in order)
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce, handle: a}, {op: all_reduce, handle: b}, {op: wait, handles: [b, a]}]
  1: [{op: all_reduce, handle: a}, {op: all_reduce, handle: b}, {op: wait, handles: [a, b]}]
""")
    assert check_trace(trace, "all").findings == []


def test_stranded_and_timeout_ends():
    trace = loads_trace("""
version: 1
world_size: 3
ranks:
  0: [{op: recv, peer: 1, site: "a.py:3"}]
  1: []
  2: [{op: recv, peer: 1}]
ends:
  1: {kind: timeout}
""")
    findings = check_trace(trace).findings
    assert [(f.code, f.ranks) for f in findings] == [("CL202", [0]), ("CL202", [2])]
    # a rank stopped by the time limit may only have been slow: not claimed a certain hang
    for f in findings:
        assert "had not got there when the recording time limit stopped it" in f.message
        assert "a hang unless that rank gets there later" in f.message
        assert "nobody will ever answer" not in f.message and "--timeout" in f.fix


def test_orphaned_wait_groups_waiters():
    trace = Trace(
        world_size=8,
        ranks={r: [Action(op="all_reduce"), Action(op="barrier")] for r in range(7)}
        | {7: [Action(op="all_reduce")]},
    )
    (f,) = check_trace(trace).findings
    assert f.code == "CL202" and f.ranks == list(range(7))
    assert f.message.startswith("ranks 0-6 wait in barrier(WORLD) for rank 7")


def test_mismatch_reported_once_per_group():
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce}, {op: barrier}, {op: broadcast, root: 0}]
  1: [{op: barrier}, {op: all_reduce}, {op: broadcast, root: 1}]
""")
    assert codes(check_trace(trace)) == ["CL203"]


def test_reduce_op_and_dtype_mismatch_do_not_block():
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce, reduce_op: sum, dtype: float32, shape: [4]}, {op: barrier}]
  1: [{op: all_reduce, reduce_op: max, dtype: bfloat16, shape: [4]}, {op: barrier}]
""")
    result = check_trace(trace)
    assert codes(result) == ["CL203", "CL204"]
    assert result.blocked() == []


def test_rank_outcomes_for_replay():
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0: [{op: send, peer: 1, shape: [8]}, {op: barrier}]
  1: [{op: recv, peer: 0, shape: [4]}, {op: barrier}]
""")
    out = check_trace(trace).outcomes["gloo"]
    assert (out[1].status, out[1].action) == ("failed", 0)  # gloo aborts the receiver
    assert (out[0].status, out[0].action) == ("blocked", 1)  # then rank 0 waits in the barrier


def test_nccl_barrier_pairing_that_drifts_is_located_at_the_first_difference():
    # rank 0's extra one-element all_reduce pairs with rank 1's barrier under NCCL; the
    # sequences drift and fail two collectives later: located at the first difference
    trace = loads_trace("""
version: 1
world_size: 2
ranks:
  0:
    - {op: all_reduce, shape: [1], dtype: float32, site: "hook.py:19"}
    - {op: barrier, site: "trainer.py:60"}
    - {op: all_reduce, shape: [], dtype: int64, site: "trainer.py:12"}
    - {op: all_gather, shape: [64], site: "trainer.py:30"}
  1:
    - {op: barrier, site: "trainer.py:60"}
    - {op: all_reduce, shape: [], dtype: int64, site: "trainer.py:12"}
    - {op: all_gather, shape: [64], site: "trainer.py:30"}
    - {op: all_gather, shape: [64], site: "trainer.py:30"}
""")
    [f] = [f for f in check_trace(trace, "nccl").findings if f.code == "CL203"]
    assert f.actions[0].site == "hook.py:19"
    assert "first differ at collective #1: all_reduce(WORLD) on rank 0 @hook.py:19" in f.message
    # gloo pairs nothing silently: the mismatch is the first pair itself
    [g] = [f for f in check_trace(trace, "gloo").findings if f.code == "CL203"]
    assert "first differ" not in g.message and g.actions[0].site == "hook.py:19"
