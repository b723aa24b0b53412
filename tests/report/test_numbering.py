"""Collective sequence numbers as users see them elsewhere: the first collective of a group is
#1, as Flight Recorder's `collective_seq_id` (checked against a real gloo dump in
`docs/output-formats.md`: the first all_reduce on a fresh group has `collective_seq_id` 1)."""

from __future__ import annotations

from commlint.graph.check import check_trace
from commlint.plans.io import loads_trace
from commlint.trace import Action, Trace

SECOND_DIFFERS = """\
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce}, {op: all_reduce}]
  1: [{op: all_reduce}, {op: barrier}]
"""


def test_the_second_collective_is_number_two():
    [finding] = check_trace(loads_trace(SECOND_DIFFERS), "gloo").findings
    assert finding.code == "CL203"
    assert "collective #2 on group 'WORLD'" in finding.message
    assert "#1" not in finding.message


def test_flight_recorder_ids_are_named_when_they_differ_from_the_position():
    # A dump whose first six entries on `tp` completed everywhere and were left out: the
    # position is #1, the dump's own id is 7 — the message gives both.
    def action(op: str, fr_id: int) -> Action:
        return Action(op=op, group="tp", label=f"tp#{fr_id} scheduled")

    trace = Trace(
        world_size=2,
        groups={"tp": [0, 1]},
        ranks={0: [action("all_reduce", 7)], 1: [action("all_gather", 7)]},
    )
    [finding] = check_trace(trace, "gloo").findings
    assert "collective #1 (Flight Recorder seq 7) on group 'tp'" in finding.message


def test_labels_that_only_look_like_ids_are_ignored():
    # a dry-run group name may carry `#2` itself; only `GROUP#ID` labels are Flight Recorder's
    trace = Trace(
        world_size=2,
        groups={"g0-1#2": [0, 1]},
        ranks={
            0: [Action(op="all_reduce", group="g0-1#2", label="bucket#9")],
            1: [Action(op="barrier", group="g0-1#2")],
        },
    )
    [finding] = check_trace(trace, "gloo").findings
    assert "collective #1 on group 'g0-1#2'" in finding.message
    assert "Flight Recorder" not in finding.message
