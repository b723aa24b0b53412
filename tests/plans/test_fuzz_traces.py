"""The checker handles every trace the format allows (issue 13).

Random valid traces — every op, async ops and waits, subgroups, calls by non-members, roots
outside the group, peers outside the group — must give a verdict without an exception, and
the same verdict across runs, hash seeds, queue models and rank relabelling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlint.graph.check import check_trace
from commlint.plans.io import dump_trace, semantic_errors
from commlint.trace import ASYNC_P2P_OPS, COLLECTIVE_OPS, OPS, P2P_OPS, ROOTED_OPS, WORLD, Trace

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    w = draw(st.integers(2, 5))
    n_groups = draw(st.integers(0, 3))
    groups: dict[str, list[int]] = {}
    for k in range(n_groups):
        members = draw(st.lists(st.integers(0, w - 1), min_size=1, max_size=w, unique=True))
        groups[f"g{k}"] = sorted(members)
    names = [WORLD, *groups]
    ranks: dict[int, list[dict]] = {}
    for rank in range(w):
        actions: list[dict] = []
        defined: list[str] = []
        for i in range(draw(st.integers(0, 6))):
            op = draw(st.sampled_from(OPS))
            a: dict = {"op": op}
            if op == "wait":
                if not defined:
                    continue
                a["handles"] = draw(st.lists(st.sampled_from(defined), min_size=1, max_size=2))
                actions.append(a)
                continue
            if op == "sync":
                actions.append(a)
                continue
            a["group"] = draw(st.sampled_from(names))
            if op in P2P_OPS:
                a["peer"] = draw(st.sampled_from([r for r in range(w) if r != rank]))
                a["tag"] = draw(st.integers(0, 1))
            if op in ROOTED_OPS:
                a["root"] = draw(st.integers(0, w - 1))
            if op in COLLECTIVE_OPS and draw(st.booleans()):
                a["async"] = True
            if (op in ASYNC_P2P_OPS or a.get("async")) and draw(st.booleans()):
                handle = draw(st.sampled_from(["h0", "h1", f"h{i}"]))
                a["handle"] = handle
                defined.append(handle)
            if op == "all_to_all" and draw(st.booleans()):
                size = w if a["group"] == WORLD else len(groups[a["group"]])
                a["in_splits"] = draw(st.lists(st.integers(0, 2), min_size=size, max_size=size))
                a["out_splits"] = draw(st.lists(st.integers(0, 2), min_size=size, max_size=size))
            if op != "barrier" and op != "all_to_all" and draw(st.booleans()):
                a["shape"] = [draw(st.integers(1, 3))]
            actions.append(a)
        ranks[rank] = actions
    return Trace.model_validate({"world_size": w, "groups": groups, "ranks": ranks})


def _verdict(trace: Trace, perm: list[int] | None = None) -> tuple:
    """What a verdict says, in rank names mapped by `perm`: every rank's outcome under every
    model, and per (code, model) the ranks the findings name. (How many findings one problem
    is told in, and which member's op a message quotes, may follow the rank numbering.)"""
    perm = perm or list(range(trace.world_size))
    result = check_trace(trace, "all")
    outcomes = {
        (m, perm[r]): (o.status, o.action) for m, outs in result.outcomes.items()
        for r, o in outs.items()
    }  # fmt: skip
    named: dict[tuple[str, str], set[int]] = {}
    for f in result.findings:
        for m in f.models or ():
            named.setdefault((f.code, m), set()).update(perm[r] for r in f.ranks)
    return outcomes, named


def _relabel(trace: Trace, perm: list[int]) -> Trace:
    data = trace.model_dump(by_alias=True, exclude_none=True)
    data["groups"] = {k: sorted(perm[r] for r in v) for k, v in data["groups"].items()}
    ranks = {}
    for rank, actions in data["ranks"].items():
        for a in actions:
            for key in ("peer", "root"):
                if key in a:
                    a[key] = perm[a[key]]
        ranks[perm[rank]] = actions
    data["ranks"] = ranks
    return Trace.model_validate(data)


@FUZZ
@given(traces(), st.randoms(use_true_random=False))
def test_every_valid_trace_gets_a_stable_verdict(trace: Trace, rnd) -> None:
    if list(semantic_errors(trace)):
        return  # e.g. a group WORLD drawn twice: not a valid trace, checked elsewhere
    first = _verdict(trace)
    assert _verdict(trace) == first
    perm = list(range(trace.world_size))
    rnd.shuffle(perm)
    assert _verdict(_relabel(trace, perm)) == _verdict(trace, perm)


def test_async_non_member_and_root_outside_then_waited() -> None:
    """Three shapes that crashed the compiler (KeyError) before: each gets its own finding
    and the rest of the verdict is intact."""
    trace = Trace.model_validate(
        {
            "world_size": 4,
            "groups": {"g": [0, 1]},
            "ranks": {
                0: [
                    {"op": "all_reduce", "group": "g", "async": True, "handle": "h"},
                    {"op": "wait", "handles": ["h"]},
                    {"op": "broadcast", "group": "g", "root": 3, "async": True, "handle": "b"},
                    {"op": "wait", "handles": ["b"]},
                ],
                1: [
                    {"op": "all_reduce", "group": "g", "async": True, "handle": "h"},
                    {"op": "wait", "handles": ["h"]},
                    {"op": "broadcast", "group": "g", "root": 3, "async": True, "handle": "b"},
                    {"op": "wait", "handles": ["b"]},
                ],
                2: [
                    {"op": "all_reduce", "group": "g", "async": True, "handle": "h"},
                    {"op": "wait", "handles": ["h"]},
                ],
                3: [
                    {"op": "isend", "peer": 0, "group": "g", "handle": "s"},
                    {"op": "wait", "handles": ["s"]},
                ],
            },
        }
    )
    for model in ("gloo", "nccl", "single-queue"):
        codes = sorted((f.code, tuple(f.ranks)) for f in check_trace(trace, model).findings)
        assert ("CL205", (2,)) in codes
        assert ("CL205", (3,)) in codes
        assert ("CL208", (0, 1)) in codes
        # the matched all_reduce on g completed: no deadlock or orphaned wait is reported
        assert not [c for c, _ in codes if c in ("CL201", "CL202")]


def test_skipped_call_reusing_a_handle_name_does_not_wait_for_the_older_op() -> None:
    """Rank 2 reuses handle `h` for a call it is not a member of; its wait must not wait for
    the earlier op named `h` (a recv nobody sends)."""
    trace = Trace.model_validate(
        {
            "world_size": 3,
            "groups": {"g": [0, 1]},
            "ranks": {
                0: [{"op": "all_reduce", "group": "g"}],
                1: [{"op": "all_reduce", "group": "g"}],
                2: [
                    {"op": "irecv", "peer": 0, "handle": "h"},
                    {"op": "all_reduce", "group": "g", "async": True, "handle": "h"},
                    {"op": "wait", "handles": ["h"]},
                ],
            },
        }
    )
    codes = {f.code for f in check_trace(trace, "gloo").findings}
    assert "CL205" in codes
    assert "CL202" not in codes  # the wait does not wait for the never-sent irecv


_HASHSEED_SCRIPT = """
import json, sys
from commlint.graph.check import check_trace
from commlint.plans.io import loads_trace
out = []
for text in json.load(sys.stdin):
    t = loads_trace(text)
    out.append(sorted((f.code, f.message) for f in check_trace(t, "all").findings))
print(json.dumps(out))
"""


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(traces(), min_size=25, max_size=25))
def test_verdict_is_identical_across_hash_seeds(batch: list[Trace]) -> None:
    texts = json.dumps([dump_trace(t) for t in batch if not list(semantic_errors(t))])
    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", _HASHSEED_SCRIPT],
            input=texts,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
