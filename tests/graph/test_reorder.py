"""Potential deadlocks under reordering (CL209): each source of nondeterminism, broken and
correct, and the witness checked by the ordinary checker."""

from __future__ import annotations

import pytest

from commlint.graph.check import check_trace
from commlint.graph.explain import explain_models
from commlint.graph.reorder import find_witnesses, reorder_trace
from commlint.plans.io import loads_trace, trace_from_data

MODELS = ("gloo", "nccl", "single-queue")


def two_ranks(actions: str, groups: str = "{g1: [0, 1], g2: [0, 1]}") -> str:
    return f"""
version: 1
world_size: 2
groups: {groups}
ranks:
  0: &r
{actions}
  1: *r
"""


# name -> (trace text, models under which a reordering deadlocks)
BROKEN = {
    "gradient hooks, blocking": (
        two_ranks(
            "    - {op: all_reduce, group: g1, bucket: 0, site: 'h.py:1'}\n"
            "    - {op: all_reduce, group: g2, bucket: 1, site: 'h.py:2'}"
        ),
        {"gloo", "nccl", "single-queue"},
    ),
    "ddp buckets + async hook op": (
        two_ranks(
            "    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0}\n"
            "    - {op: all_reduce, group: aux, async: true, handle: h, bucket: 1}\n"
            "    - {op: all_reduce, group: dp, async: true, handle: b1, bucket: 1}\n"
            "    - {op: wait, handles: [b0, b1, h]}",
            "{dp: [0, 1], aux: [0, 1]}",
        ),
        {"single-queue"},
    ),
    "two threads, blocking": (
        two_ranks(
            "    - {op: all_reduce, group: g1, thread: loader}\n"
            "    - {op: all_reduce, group: g2, thread: worker}"
        ),
        {"nccl", "single-queue"},
    ),
    "async ops of two threads": (
        two_ranks(
            "    - {op: all_reduce, group: g1, async: true, handle: a, thread: t1}\n"
            "    - {op: all_reduce, group: g2, async: true, handle: b, thread: t2}\n"
            "    - {op: wait, handles: [a, b]}"
        ),
        {"single-queue"},
    ),
}

CORRECT = {
    "async ops of one thread keep their issue order (single-queue is FIFO)": two_ranks(
        "    - {op: all_reduce, group: g1, async: true, handle: a}\n"
        "    - {op: all_reduce, group: g2, async: true, handle: b}\n"
        "    - {op: wait, handles: [a, b]}"
    ),
    "async p2p and a collective of one thread": """
version: 1
world_size: 2
groups: {g1: [0, 1]}
ranks:
  0:
    - {op: isend, peer: 1, handle: s}
    - {op: all_reduce, group: g1, async: true, handle: a}
    - {op: wait, handles: [s, a]}
  1:
    - {op: irecv, peer: 0, handle: r}
    - {op: all_reduce, group: g1, async: true, handle: a}
    - {op: wait, handles: [r, a]}
""",
    "hooks on one group keep their order": two_ranks(
        "    - {op: all_reduce, group: g1, bucket: 0, shape: [4]}\n"
        "    - {op: all_reduce, group: g1, bucket: 1, shape: [8]}"
    ),
    "hook op waited before the next bucket": two_ranks(
        "    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0}\n"
        "    - {op: wait, handles: [b0]}\n"
        "    - {op: all_reduce, group: aux, async: true, handle: h}\n"
        "    - {op: wait, handles: [h]}",
        "{dp: [0, 1], aux: [0, 1]}",
    ),
    "hook op of the same bucket as the only bucket": two_ranks(
        "    - {op: all_reduce, group: aux, async: true, handle: h, bucket: 0}\n"
        "    - {op: all_reduce, group: dp, async: true, handle: b0, bucket: 0}\n"
        "    - {op: wait, handles: [b0, h]}",
        "{dp: [0, 1], aux: [0, 1]}",
    ),
    "main-thread blocking calls are fences": two_ranks(
        "    - {op: all_reduce, group: g1}\n    - {op: all_reduce, group: g2}"
    ),
    "one thread's async ops, waited one by one": two_ranks(
        "    - {op: all_reduce, group: g1, async: true, handle: a}\n"
        "    - {op: wait, handles: [a]}\n"
        "    - {op: all_reduce, group: g2, async: true, handle: b}\n"
        "    - {op: wait, handles: [b]}"
    ),
    "batched isend/irecv stay one unit": """
version: 1
world_size: 2
ranks:
  0:
    - {op: isend, peer: 1, handle: s, batch: x}
    - {op: irecv, peer: 1, handle: r, batch: x}
    - {op: wait, handles: [s, r]}
  1:
    - {op: irecv, peer: 0, handle: r, batch: x}
    - {op: isend, peer: 0, handle: s, batch: x}
    - {op: wait, handles: [s, r]}
""",
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_reports_cl209_under_exactly_the_expected_models(name):
    text, expected = BROKEN[name]
    result = check_trace(loads_trace(text), "all")
    assert not [f for f in result.findings if f.severity == "error"], "recorded order is fine"
    found = [f for f in result.findings if f.code == "CL209"]
    assert found, name
    assert set().union(*(f.models for f in found)) == expected
    f = found[0]
    assert f.severity == "warning" and f.fix and f.cycle
    assert f.actions and all(loc.rank is not None for loc in f.actions)
    assert "Possible under" in f.message
    assert {loc.message.split(":")[0] for loc in f.related} == {*MODELS, "witness"}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_has_no_finding(name):
    result = check_trace(loads_trace(CORRECT[name]), "all")
    assert [f.code for f in result.findings] == []


@pytest.mark.parametrize("name", list(BROKEN))
def test_witness_deadlocks_in_the_ordinary_checker(name):
    text, expected = BROKEN[name]
    trace = loads_trace(text)
    for model in expected:
        witnesses = find_witnesses(trace, model)
        assert witnesses
        for w in witnesses:
            reordered = reorder_trace(trace, w.orders)
            for rank, acts in trace.ranks.items():  # a permutation; waits stay where they were
                new = reordered.ranks[rank]
                assert sorted(a.model_dump_json() for a in new) == sorted(
                    a.model_dump_json() for a in acts
                )
                for k, a in enumerate(acts):
                    if a.op in ("wait", "sync"):
                        assert new[k] == a
            codes = {f.code for f in check_trace(reordered, model, reorder=False).findings}
            assert "CL201" in codes
            assert reordered != trace


def test_three_rank_cycle_needs_two_ranks_to_reorder():
    """No pair of ranks orders two groups oppositely: only a cycle over three groups finds it."""
    trace = loads_trace("""
version: 1
world_size: 3
groups: {a: [0, 1], b: [1, 2], c: [0, 2]}
ranks:
  0: [{op: all_reduce, group: a, bucket: 0}, {op: all_reduce, group: c, bucket: 1}]
  1: [{op: all_reduce, group: a, bucket: 0}, {op: all_reduce, group: b, bucket: 1}]
  2: [{op: all_reduce, group: b, bucket: 0}, {op: all_reduce, group: c, bucket: 1}]
""")
    (w,) = find_witnesses(trace, "gloo")
    assert sorted(w.deadlock.ranks) == [0, 1, 2]
    assert len(w.orders) == 2  # two ranks swap, the third keeps its recorded order


def test_recorded_deadlock_is_not_reported_again_as_potential():
    trace = loads_trace(
        """
version: 1
world_size: 2
groups: {g1: [0, 1], g2: [0, 1]}
ranks:
  0: [{op: all_reduce, group: g1, bucket: 0}, {op: all_reduce, group: g2, bucket: 1}]
  1: [{op: all_reduce, group: g2, bucket: 1}, {op: all_reduce, group: g1, bucket: 0}]
"""
    )
    codes = [f.code for f in check_trace(trace, "all").findings]
    assert "CL201" in codes and "CL209" not in codes


def test_reorder_can_be_switched_off():
    text, _ = BROKEN["gradient hooks, blocking"]
    assert check_trace(loads_trace(text), "gloo", reorder=False).findings == []


def test_explain_models_says_why_one_model_is_safe():
    text, _ = BROKEN["two threads, blocking"]
    lines = dict(line.split(None, 1) for line in explain_models(loads_trace(text)))
    assert lines["gloo"].startswith("safe")
    assert "own thread" in lines["gloo"]
    assert lines["nccl"].startswith("potential deadlock")
    assert "compute stream" in lines["nccl"]


def test_sync_model_recorded_disorder_hangs_only_with_sync():
    """DFCCL Fig. 1(d): opposite orders with a device sync in between hang under nccl's sync
    semantics, while gloo (sync is a no-op on CPU) completes."""
    trace = loads_trace("""
version: 1
world_size: 2
groups: {g1: [0, 1], g2: [0, 1]}
ranks:
  0:
    - {op: all_reduce, group: g1, async: true, handle: a}
    - {op: sync}
    - {op: all_reduce, group: g2, async: true, handle: b}
    - {op: wait, handles: [a, b]}
  1:
    - {op: all_reduce, group: g2, async: true, handle: b}
    - {op: sync}
    - {op: all_reduce, group: g1, async: true, handle: a}
    - {op: wait, handles: [a, b]}
""")
    lines = dict(line.split(None, 1) for line in explain_models(trace))
    assert lines["gloo"].startswith("safe")
    assert lines["nccl"].startswith("hangs")


def ddp_trace(buckets: int, hook_bucket: int) -> dict:
    """One DDP step: fused all-reduces on dp in bucket order, plus an async all-reduce on aux
    issued from the hook of a parameter in `hook_bucket` (recorded first, as rank 0 saw it)."""
    acts = [
        {"op": "all_reduce", "group": "aux", "async": True, "handle": "h", "bucket": hook_bucket}
    ]
    for k in range(buckets):
        acts.append(
            {"op": "all_reduce", "group": "dp", "async": True, "handle": f"b{k}", "bucket": k}
        )
    acts.append({"op": "wait", "handles": [f"b{k}" for k in range(buckets)] + ["h"]})
    return {
        "version": 1,
        "world_size": 2,
        "groups": {"dp": [0, 1], "aux": [0, 1]},
        "ranks": {0: acts, 1: acts},
    }


@pytest.mark.parametrize(
    ("buckets", "hook_bucket", "exposed"),
    [(1, 0, False), (4, 0, False), (4, 3, True), (2, 1, True)],
)
def test_ddp_exposure_grows_with_bucket_count(buckets, hook_bucket, exposed):
    trace = trace_from_data(ddp_trace(buckets, hook_bucket))
    codes = {f.code for f in check_trace(trace, "single-queue").findings}
    assert ("CL209" in codes) == exposed


def test_module_cli_prints_models_and_reports_bad_input(tmp_path, capsys):
    from commlint.commands.reorder import main

    good = tmp_path / "threads.yaml"
    good.write_text(BROKEN["two threads, blocking"][0])
    assert main([str(good), str(tmp_path / "missing.yaml")]) == 2
    out, err = capsys.readouterr()
    assert "gloo" in out and "nccl          potential deadlock" in out
    assert err.count("\n") == 1 and "missing.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize("name", list(BROKEN))
def test_witness_in_the_finding_alone_reproduces_the_deadlock(name):
    """The JSON finding is enough: permute the listed actions into their slots and check."""
    text, _ = BROKEN[name]
    trace = loads_trace(text)
    finding = next(f for f in check_trace(trace, "all").findings if f.code == "CL209")
    ranks = {r: list(a) for r, a in trace.ranks.items()}
    orders = [loc for loc in finding.related if loc.message.startswith("witness:")]
    assert orders
    for loc in orders:
        order = [int(k) for k in loc.message.split("[")[1].split("]")[0].split(", ")]
        for slot, k in zip(sorted(order), order, strict=True):
            ranks[loc.rank][slot] = trace.ranks[loc.rank][k]
    reordered = trace.model_copy(update={"ranks": ranks})
    for model in finding.models:
        codes = {f.code for f in check_trace(reordered, model, reorder=False).findings}
        assert "CL201" in codes
