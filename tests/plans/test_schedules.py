"""Pipeline compute orders: structure, CSV form, and torch's own schedule classes."""

from __future__ import annotations

import pytest

from commlint.findings import CommlintInputError
from commlint.plans import schedules as sch


def _kinds(steps: list[sch.Step]) -> str:
    return " ".join(str(s) for s in steps)


@pytest.mark.parametrize("pp,n", [(1, 1), (2, 2), (4, 8), (8, 3), (3, 7)])
def test_1f1b_runs_every_microbatch_once_and_forward_first(pp: int, n: int) -> None:
    steps = sch.one_f_one_b(pp, n)
    for p, row in steps.items():
        fwd = [s.microbatch for s in row if s.kind == "F"]
        bwd = [s.microbatch for s in row if s.kind == "B"]
        assert fwd == list(range(n)) and bwd == list(range(n))
        for m in range(n):
            assert row.index(sch.Step("F", p, m)) < row.index(sch.Step("B", p, m))
        # warm-up: pp - p - 1 forwards before the first backward (capped at n)
        first_b = next(i for i, s in enumerate(row) if s.kind == "B")
        assert first_b == min(pp - p - 1, n) + (1 if n > min(pp - p - 1, n) else 0)


def test_1f1b_steady_state_alternates() -> None:
    assert _kinds(sch.one_f_one_b(4, 6)[1]) == "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5"


def test_zbh1_splits_backward_and_defers_weight_grads() -> None:
    row = sch.one_f_one_b(4, 6, split_backward=True)[0]
    assert [s.kind for s in row].count("I") == 6 and [s.kind for s in row].count("W") == 6
    for m in range(6):
        assert row.index(sch.Step("I", 0, m)) < row.index(sch.Step("W", 0, m))
    # the last stage has no bubble to fill: its W follows its I at once
    last = sch.one_f_one_b(4, 6, split_backward=True)[3]
    assert _kinds(last[:4]) == "3F0 3I0 3W0 3F1"


def test_interleaved_follows_megatron_order() -> None:
    steps = sch.interleaved(4, 2, 8)
    # rank 3: warm-up (pp-p-1)*2 + (vpp-1)*pp = 4 forwards of chunk 0, then F/B pairs
    assert _kinds(steps[3][:8]) == "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1"
    # rank 0: 10 warm-up forwards over both chunks, microbatch groups of pp
    assert _kinds(steps[0][:10]) == "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5"
    for p, row in steps.items():
        assert len(row) == 2 * 2 * 8
        assert {s.stage for s in row} == {p, p + 4}


def test_interleaved_all_warmup_when_microbatches_equal_pp() -> None:
    row = sch.interleaved(2, 2, 2)[1]
    assert [s.kind for s in row] == ["F"] * 4 + ["B"] * 4


def test_interleaved_needs_microbatch_multiple_of_pp() -> None:
    with pytest.raises(CommlintInputError, match="multiple of pp"):
        sch.interleaved(4, 2, 6)


def test_csv_round_trip_and_stage_map() -> None:
    steps = sch.interleaved(2, 2, 4)
    text = sch.dump_csv(steps)
    parsed = sch.read_csv(text)
    assert parsed.steps == steps
    assert parsed.stages.owner == (0, 1, 0, 1)
    assert parsed.microbatches == 4 and not parsed.with_comms


def test_csv_with_comms_and_v_shape() -> None:
    text = "0F0,0SEND_F0,,3RECV_B0,3B0\n1RECV_F0,1F0,2F0,2B0,1B0\n"
    with pytest.raises(CommlintInputError, match="never runs the backward"):
        sch.read_csv(text)  # stage 0 has F0 but no backward: counts are checked
    text = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,2F0,2B0,1B0,1SEND_B0\n"
    with pytest.raises(CommlintInputError, match=r"stages \[2\] are never computed"):
        sch.read_csv(text.replace("2F0,2B0", "3F0,3B0"))
    parsed = sch.read_csv(text)
    assert parsed.with_comms and parsed.stages.owner == (0, 1, 1)


@pytest.mark.parametrize(
    "text,message",
    [
        ("0F0,0X1\n", "row 1, column 2: cannot read action '0X1'"),
        ("0F0,0B\n", "has no microbatch index"),
        ("0F0,0B0\n0F1,0B1\n", "stage 0 is also computed on row 1"),
        ("0F0,0F0,0B0\n", "runs F for microbatch 0 2 times"),
        ("\n\n", "the schedule CSV is empty"),
    ],
)
def test_csv_errors_are_located(text: str, message: str) -> None:
    with pytest.raises(CommlintInputError, match=message.replace("(", "\\(").replace("[", "\\[")):
        sch.read_csv(text, "sched.csv")


def test_csv_skips_fsdp_steps_and_flattens_overlapped_actions() -> None:
    text = "0UNSHARD,0F0,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2,0REDUCE_GRAD\n"
    parsed = sch.read_csv(text)
    assert _kinds(parsed.steps[0]) == "0F0 0F1 0F2 0B0 0B1 0B2"


def test_unknown_schedule_and_vpp_mismatch() -> None:
    with pytest.raises(CommlintInputError, match="unknown schedule 'pipedream'"):
        sch.build("pipedream", 2, 1, 4)
    with pytest.raises(CommlintInputError, match="one stage per rank"):
        sch.build("1f1b", 2, 2, 4)


# torch's own schedule classes (imports torch: tests only, never the checker)


def test_interleaved_equals_torch_interleaved1f1b() -> None:
    tp = pytest.importorskip("torch_pipelining")
    for pp, n in [(2, 4), (4, 8), (4, 12)]:
        theirs = tp.as_steps(tp.pipeline_order("interleaved", pp, n))
        assert theirs == sch.interleaved(pp, 2, n)


def test_gpipe_equals_torch_gpipe() -> None:
    tp = pytest.importorskip("torch_pipelining")
    theirs = tp.as_steps(tp.without_reduce_grad(tp.pipeline_order("gpipe", 4, 6)))
    assert theirs == sch.gpipe(4, 6)


def test_1f1b_equals_torch_except_its_last_rank() -> None:
    """torch 2.13's Schedule1F1B._get_pipeline_order starts the last rank at F1 and invents
    F{n}: its forward counter is bumped before the first use when there is no warm-up."""
    tp = pytest.importorskip("torch_pipelining")
    pp, n = 4, 8
    theirs = tp.as_steps(tp.without_reduce_grad(tp.pipeline_order("1f1b", pp, n)))
    ours = sch.one_f_one_b(pp, n)
    for p in range(pp - 1):
        assert theirs[p] == ours[p]
    last = [s for s in theirs[pp - 1] if s.kind == "F"]
    assert last[0] == sch.Step("F", pp - 1, 1) and last[-1] == sch.Step("F", pp - 1, n)
    with pytest.raises(CommlintInputError, match="stage 0 never runs F for microbatch 8"):
        sch.read_csv(tp.to_csv(tp.without_reduce_grad(tp.pipeline_order("1f1b", pp, n))))
