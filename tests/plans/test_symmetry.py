"""The symmetry shortcut (commlint.graph.symmetry): checking one rank per orbit of a generated
plan must decide exactly what checking every rank decides.

The strong form tested here: for every plan of a sweep — valid and broken — each rank's
outcome in the whole-trace check equals its representative's outcome in the quotient check,
under every queue model. A broken plan must therefore be broken in the quotient too.
"""

from __future__ import annotations

import random

import pytest

from commlint.findings import CommlintInputError
from commlint.graph.check import check_trace
from commlint.graph.symmetry import certificate, quotient
from commlint.plans.generate import generate, generate_from_spec
from commlint.plans.io import dump_trace, loads_trace
from commlint.trace import Trace

MODELS = ("gloo", "nccl", "single-queue")


def _fate(o) -> tuple:
    return (o.status, o.action)


def assert_quotient_exact(trace: Trace) -> bool:
    """Compare the quotient with the whole trace under every model; True if a quotient
    existed (so the caller can count how often the shortcut was really exercised)."""
    cut = quotient(trace)
    if cut is None:
        return False
    small, cert = cut
    for m in MODELS:
        full = check_trace(trace, m, symmetry=False, reorder=False)
        part = check_trace(small, m, symmetry=False, reorder=False)
        want = {r: _fate(o) for r, o in full.outcomes[m].items()}
        got = {r: _fate(part.outcomes[m][cert.rep_of[r]]) for r in range(trace.world_size)}
        assert got == want, (m, trace.meta)
        assert bool(full.findings) == bool(part.findings), (m, trace.meta)
        # and the public entry point reports exactly the full findings
        fast = check_trace(trace, m)
        assert [(f.code, f.message) for f in fast.findings] == [
            (f.code, f.message) for f in check_trace(trace, m, symmetry=False).findings
        ]
    return True


def test_issue_plan_is_checked_on_one_rank_per_pipeline_stage() -> None:
    t = generate(world_size=1024, degrees={"tp": 8, "pp": 8, "dp": 16}, microbatches=8)
    cert = certificate(t)
    assert cert is not None
    assert cert.axes == ["tp", "dp_replicate"]
    assert cert.reps == [0, 128, 256, 384, 512, 640, 768, 896]  # one rank per stage
    assert cert.rep_of[1023] == 896 and cert.rep_of[137] == 128
    result = check_trace(t, "nccl")
    assert result.findings == []
    assert len(result.outcomes["nccl"]) == 1024
    assert {o.status for o in result.outcomes["nccl"].values()} == {"finished"}


def test_rank_selective_mutation_drops_only_the_axis_it_breaks() -> None:
    t = generate(
        world_size=16,
        degrees={"tp": 2, "pp": 2, "dp": 4},
        microbatches=4,
        mutations=[{"kind": "last_microbatch", "dp_rank": 1, "microbatches": 3}],
        collectives={"dp": "fsdp"},
    )
    cert = certificate(t)
    assert cert is not None and cert.axes == ["tp"]  # dp replicas now differ
    assert assert_quotient_exact(t)
    assert {f.code for f in check_trace(t, "gloo").findings} == {"CL203"}


BROKEN = [
    {"p2p": {"style": "megatron", "blocking": True}, "mutations": ["fixed_order"]},
    {"mutations": ["fixed_order"]},
    {"mutations": [{"kind": "head_to_head", "stage": 1}]},
    {
        "p2p": {"style": "deepspeed", "tags": "microbatch"},
        "mutations": [{"kind": "fifo_mismatch", "stage": 1, "microbatches": [2, 3]}],
    },
    {
        "mutations": [{"kind": "fifo_mismatch", "stage": 1, "microbatches": [2, 3]}],
        "activation": {"shape": [128, 1, 64]},
        "seq_lengths": [128, 128, 128, 96, 128, 128, 128, 128],
    },
    {"mutations": ["early_embedding_allreduce"]},
    {
        "mutations": [{"kind": "last_microbatch", "dp_rank": 1, "microbatches": 7}],
        "collectives": {"dp": "fsdp"},
    },
]


@pytest.mark.parametrize("spec", BROKEN, ids=range(len(BROKEN)))
def test_broken_plans_are_broken_in_the_quotient(spec: dict) -> None:
    base = {"world_size": 32, "degrees": {"pp": 4, "tp": 2, "dp": 4}, "microbatches": 8}
    t = generate_from_spec({**base, **spec})
    assert assert_quotient_exact(t)
    assert any(check_trace(t, m).findings for m in MODELS)


def test_sweep_quotient_decides_like_the_whole_trace() -> None:
    """A seeded sweep over layouts, schedules, styles, axis collectives and mutations."""
    rng = random.Random(11)
    exercised = broken = 0
    for _ in range(60):
        schedule = rng.choice(["gpipe", "1f1b", "zbh1", "interleaved"])
        pp = rng.choice([1, 2, 3, 4])
        spec = {
            "degrees": {
                "pp": pp,
                "vpp": rng.choice([2, 3]) if schedule == "interleaved" else 1,
                "tp": rng.choice([1, 2, 4]),
                "cp": rng.choice([1, 2]),
                "ep": rng.choice([1, 2]),
                "dp": rng.choice([1, 2, 4]),
            },
            "layout": rng.choice(["megatron", "torchtitan"]),
            "schedule": schedule,
            "microbatches": rng.choice([2, 3, 4, 6, 8]),
            "p2p": rng.choice(["megatron", "batched", "torch", "deepspeed"]),
            "collectives": {
                "dp": rng.choice(["all_reduce", "distributed_optimizer", "fsdp"]),
                "tp": rng.choice(["all_reduce", "sequence_parallel"]),
                "cp": rng.choice(["ring", "all_to_all"]),
                "overlap_grad_reduce": rng.choice([True, False]),
            },
        }
        if rng.random() < 0.5:
            spec["mutations"] = [
                rng.choice(
                    [
                        "fixed_order",
                        {"kind": "head_to_head", "stage": 0},
                        {"kind": "fifo_mismatch", "stage": pp - 1, "microbatches": [0, 1]},
                        "early_embedding_allreduce",
                        {"kind": "last_microbatch", "dp_rank": 0, "microbatches": 1},
                    ]
                )
            ]
        try:
            trace = generate_from_spec(spec)
        except CommlintInputError:
            continue
        if assert_quotient_exact(trace):
            exercised += 1
            broken += any(check_trace(trace, m).findings for m in MODELS)
    assert exercised >= 25
    assert broken >= 5


def test_an_edited_trace_loses_its_certificate_and_is_checked_whole() -> None:
    t = generate(world_size=16, degrees={"tp": 2, "pp": 2, "dp": 4}, microbatches=4)
    assert certificate(t) is not None
    # a non-representative rank now issues a different collective: the certificate no
    # longer holds, and the full check finds what the quotient could not see
    victim = 7
    assert certificate(t).rep_of[victim] != victim
    i = next(i for i, a in enumerate(t.ranks[victim]) if a.op == "all_reduce")
    t.ranks[victim][i] = t.ranks[victim][i].model_copy(update={"op": "all_gather"})
    assert certificate(t) is None
    assert "CL203" in {f.code for f in check_trace(t, "gloo").findings}


def test_generated_actions_are_immutable_and_groups_are_watched() -> None:
    t = generate(world_size=8, degrees={"tp": 2, "pp": 2, "dp": 2}, microbatches=2)
    with pytest.raises(ValueError, match="frozen"):
        t.ranks[0][0].op = "barrier"
    t.groups[next(iter(t.groups))].reverse()
    assert certificate(t) is None


def test_a_reloaded_plan_has_no_certificate_but_the_same_verdict() -> None:
    t = generate(world_size=16, degrees={"tp": 2, "pp": 2, "dp": 4}, microbatches=4)
    again = loads_trace(dump_trace(t))
    assert certificate(again) is None
    for m in MODELS:
        assert [_fate(o) for o in check_trace(again, m).outcomes[m].values()] == [
            _fate(o) for o in check_trace(t, m).outcomes[m].values()
        ]


def test_orbits_mode_rejects_a_broken_plan_from_the_quotient_alone() -> None:
    t = generate(
        world_size=64,
        degrees={"tp": 2, "pp": 4, "dp": 8},
        microbatches=8,
        mutations=[{"kind": "head_to_head", "stage": 1}],
    )
    full = check_trace(t, "nccl", symmetry=False)
    fast = check_trace(t, "nccl", symmetry="orbits")
    assert {f.code for f in fast.findings} == {f.code for f in full.findings} == {"CL201"}
    assert {_fate(o) for o in fast.outcomes["nccl"].values()} == {
        _fate(o) for o in full.outcomes["nccl"].values()
    }
    assert fast.outcomes["nccl"] == full.outcomes["nccl"]
    reps = set(certificate(t).reps)
    cycle = fast.findings[0]
    assert {loc.rank for loc in cycle.actions} <= reps
    assert "symmetric along tp, dp_replicate" in cycle.message
    assert "16 symmetric copies" in cycle.message
    with pytest.raises(ValueError, match="symmetry must be"):
        check_trace(t, "nccl", symmetry="yes")


def test_cli_symmetry_flag(tmp_path, capsys) -> None:
    from commlint.cli import main

    plan = tmp_path / "h2h.yaml"
    plan.write_text(
        "version: 1\n"
        "generate: {world_size: 32, degrees: {tp: 2, pp: 4, dp: 4}, microbatches: 8,\n"
        "           mutations: [{kind: head_to_head, stage: 1}]}\n"
    )
    counts = {}
    for mode in ("on", "orbits", "off"):
        code = main(["plan", str(plan), "--symmetry", mode, "--format", "json"])
        assert code == 1
        out = capsys.readouterr().out
        counts[mode] = out.count('"code": "CL201"')
    assert counts["on"] == counts["off"] == 8  # one cycle per (tp, dp) copy
    assert counts["orbits"] == 1
