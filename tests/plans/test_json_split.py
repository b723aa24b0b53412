"""The fast JSON plan parse (innermost objects cut out and parsed once each) reads every
text exactly as `json.loads` does, or hands it to the whole-text parse."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlint.findings import CommlintInputError
from commlint.plans.io import _json_split, _parse_json, loads_trace

PLAN = {
    "version": 1,
    "world_size": 2,
    "groups": {"g": [0, 1]},
    "ranks": {
        "0": [{"op": "all_reduce", "group": "g", "shape": [2, 3]}, {"op": "barrier"}],
        "1": [{"op": "all_reduce", "group": "g", "shape": [2, 3]}, {"op": "barrier"}],
    },
}


def test_a_plan_takes_the_fast_path_and_reads_as_json_loads() -> None:
    text = json.dumps(PLAN)
    fast = _json_split(text)
    assert fast == json.loads(text)
    # equal actions are one object; the groups mapping is its own
    assert fast["ranks"]["0"][0] is fast["ranks"]["1"][0]


@pytest.mark.parametrize(
    "label",
    ["{}", "a{b}c", '{"op": 1}', "x}", "{", '{"k": "v"}, {"j": 2}', "NaN"],
)
def test_braces_inside_strings_never_change_what_is_read(label: str) -> None:
    plan = json.loads(json.dumps(PLAN))
    plan["ranks"]["0"][1]["label"] = label
    plan["meta"] = {"note": label, "nested": {"t": label}}
    text = json.dumps(plan)
    assert _parse_json(text, "p.json") == json.loads(text)


def test_equal_objects_that_are_not_actions_stay_separate() -> None:
    text = json.dumps({**PLAN, "meta": {"a": {"x": 1}, "b": {"x": 1}}})
    data = _parse_json(text, "p.json")
    assert data["meta"]["a"] == data["meta"]["b"]
    assert data["meta"]["a"] is not data["meta"]["b"]


def test_a_duplicate_key_inside_an_action_is_a_located_error() -> None:
    text = json.dumps(PLAN, indent=1).replace('"op": "barrier"', '"op": "barrier", "op": "x"', 1)
    with pytest.raises(CommlintInputError) as exc:
        loads_trace(text, is_json=True, path="p.json")
    assert "duplicate key 'op'" in str(exc.value)
    assert (
        exc.value.error.line
        == text.splitlines().index(next(line for line in text.splitlines() if '"op": "x"' in line))
        + 1
    )


scalars = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    st.text(alphabet='{}[]"\\:,aN ', max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='{}"ab', max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_any_json_reads_as_json_loads(value: object) -> None:
    text = json.dumps(value)
    assert _parse_json(text, "p.json") == json.loads(text)
    # and what the fast path accepts, it reads right
    fast = None
    with contextlib.suppress(ValueError):
        fast = _json_split(text)
    if fast is not None:
        assert fast == json.loads(text)
