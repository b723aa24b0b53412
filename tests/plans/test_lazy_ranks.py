"""Generated plans build each rank's actions on first access (commlint.plans.lazy).

The symmetry shortcut reads one rank per orbit; everything else that reads a rank, or all of
them, must see exactly what an eager build gives, and any change must void the certificate."""

from __future__ import annotations

import copy
import json
import pickle

from commlint.graph.check import check_trace
from commlint.graph.symmetry import certificate
from commlint.plans.generate import generate
from commlint.plans.lazy import UNBUILT, LazyRanks
from commlint.trace import Action

SPEC = {"world_size": 64, "degrees": {"tp": 2, "pp": 4, "dp": 8}, "microbatches": 8}


def eager(trace) -> dict[int, list[dict]]:
    return {r: [a.model_dump() for a in trace.ranks[r]] for r in range(trace.world_size)}


def test_clean_plan_builds_only_representatives_and_agrees_with_every_rank():
    trace = generate(**SPEC)
    assert isinstance(trace.ranks, LazyRanks) and trace.ranks.unbuilt() == 64
    cert = certificate(trace)
    assert cert is not None and trace.ranks.unbuilt() == 64  # the proof reads no rank
    fast = check_trace(trace, "all")
    assert fast.findings == []
    assert trace.ranks.unbuilt() == 64 - len(cert.reps)
    full = check_trace(generate(**SPEC), "all", symmetry=False)
    assert full.findings == []
    assert {m: {r: o.status for r, o in outs.items()} for m, outs in fast.outcomes.items()} == {
        m: {r: o.status for r, o in outs.items()} for m, outs in full.outcomes.items()
    }


def test_every_way_of_reading_sees_the_eager_build():
    reference = eager(generate(**SPEC))
    for read in (
        lambda t: dict(t.ranks),
        lambda t: {**t.ranks},
        lambda t: dict(t.ranks.items()),
        lambda t: t.ranks.copy(),
        lambda t: copy.deepcopy(t.ranks),
        lambda t: pickle.loads(pickle.dumps(t.ranks)),
        lambda t: dict(zip(t.ranks, t.ranks.values(), strict=True)),
        lambda t: {r: t.ranks.get(r) for r in t.ranks},
    ):
        trace = generate(**SPEC)
        got = read(trace)
        assert UNBUILT not in got.values()
        assert {r: [a.model_dump() for a in acts] for r, acts in got.items()} == reference
    trace = generate(**SPEC)
    dumped = trace.model_dump()["ranks"]
    assert {r: acts for r, acts in dumped.items()} == reference
    assert json.loads(generate(**SPEC).model_dump_json())["ranks"]["63"] == json.loads(
        json.dumps(reference[63])
    )
    assert generate(**SPEC) == generate(**SPEC)
    assert trace.num_actions() == sum(len(v) for v in reference.values())


def _broken(acts: list[Action]) -> list[Action]:
    """The rank skips its first collective: its peers wait for it."""
    i = next(i for i, a in enumerate(acts) if a.op == "all_reduce")
    return acts[:i] + acts[i + 1 :]


def test_changing_a_rank_never_built_voids_the_certificate():
    for change in (
        lambda t: t.ranks.__setitem__(37, _broken(list(t.ranks[37]))),
        lambda t: t.ranks.update({37: _broken(list(t.ranks[37]))}),
        lambda t: t.ranks[37].remove(next(a for a in t.ranks[37] if a.op == "all_reduce")),
    ):
        trace = generate(**SPEC)
        assert trace.ranks.unbuilt() == 64
        change(trace)
        assert certificate(trace) is None
        assert check_trace(trace, "gloo").findings, "the broken rank must be found"


def test_another_mapping_is_compared_in_full():
    trace = generate(**SPEC)
    copied = trace.model_copy(update={"ranks": {r: list(trace.ranks[r]) for r in range(64)}})
    assert certificate(copied) is not None  # same actions, same objects: still exact
    other = generate(**SPEC)
    plain = other.model_copy(update={"ranks": dict(other.ranks)})
    plain.ranks[5] = _broken(plain.ranks[5])
    assert certificate(plain) is None
    lazy_untouched = generate(**SPEC)
    swapped = lazy_untouched.model_copy(update={"ranks": LazyRanks(range(64), lambda r: [])})
    assert certificate(swapped) is None  # an unbuilt rank vouches only in its own mapping
