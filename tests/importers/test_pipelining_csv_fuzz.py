"""Hostile pipelining CSVs (issue 13): whatever the cells say, the importer returns a trace
the checker handles or raises one located `CommlintInputError` — never another exception,
and never memory beyond the file's size (indices are bounded by its cells)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commlint.findings import CommlintInputError
from commlint.graph.check import check_trace
from commlint.plans.importers.pipelining_csv import loads_pipelining_csv

KINDS = ["F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD"]
index = st.one_of(st.integers(0, 5), st.integers(0, 10**15), st.just(10**40))


@st.composite
def cell(draw) -> str:
    kind = draw(st.sampled_from([*KINDS, "REDUCE_GRAD", "OVERLAP", "junk", "empty"]))
    if kind == "empty":
        return ""
    if kind == "junk":
        return draw(st.text(alphabet="0123456789FBIWSENDRCV_;()x ", max_size=12))
    if kind == "OVERLAP":
        return f"({draw(index)}F{draw(index)};{draw(index)}B{draw(index)})OVERLAP_F_B"
    mb = "" if kind in ("UNSHARD", "RESHARD", "REDUCE_GRAD") else str(draw(index))
    return f"{draw(index)}{kind}{mb}"


csv_text = st.lists(st.lists(cell(), max_size=8), min_size=1, max_size=5).map(
    lambda rows: "\n".join(",".join(r) for r in rows) + "\n"
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(csv_text, st.sampled_from(["auto", "compute_only", "compute_comms"]))
def test_any_csv_is_a_trace_or_one_located_error(text, fmt):
    try:
        trace = loads_pipelining_csv(text, fmt, path="fuzz.csv")
    except CommlintInputError as exc:
        assert exc.error.path == "fuzz.csv"
        assert "\n" not in str(exc)
        return
    assert trace.world_size <= text.count("\n") + 2 * len(text) + 10
    result = check_trace(trace, "all")
    assert all(f.code.startswith("CL2") for f in result.findings)


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 6), st.integers(1, 6))
def test_regular_schedules_stay_clean(pp, microbatches):
    """GPipe written by hand: every stage forwards every microbatch, then backwards."""
    rows = [
        ",".join(
            [f"{r}F{m}" for m in range(microbatches)] + [f"{r}B{m}" for m in range(microbatches)]
        )
        for r in range(pp)
    ]
    trace = loads_pipelining_csv("\n".join(rows) + "\n")
    assert check_trace(trace, "all").findings == []
