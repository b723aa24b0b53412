"""commlint next to torch.distributed.pipelining's own schedule simulator, case by case.

torch's `_simulate_comms_compute` runs the ranks in lock step: a SEND never blocks, a RECV
is ready once a SEND of the same name (stage, microbatch) exists anywhere, and there are no
process groups, collectives or waits. commlint matches p2p in FIFO order per channel and
blocks on sends under the runtime's queue model. Each test below is one row of the table in
docs/plans.md.
"""

from __future__ import annotations

import pytest

from commlint.graph.check import check_trace
from commlint.graph.compile import compile_trace
from commlint.plans import schedules as sch
from commlint.plans.generate import generate

tp = pytest.importorskip("torch_pipelining")

MODELS = ("gloo", "nccl", "single-queue")
PIPELINE_ONLY = {"embedding": False, "dp": "none"}  # torch's simulator sees the pipeline only
OK = {m: "ok" for m in MODELS}


def verdicts(trace) -> dict:
    return {m: sorted({f.code for f in check_trace(trace, m).findings}) or "ok" for m in MODELS}


def order(text: str) -> dict[int, list]:
    """A compute+comms schedule, one line per rank."""
    return {
        r: [tp.parse(cell) for cell in row.split()]
        for r, row in enumerate(text.strip().splitlines())
    }


def gate(schedule: dict[int, list], **options) -> dict:
    pp = len(schedule)
    trace = generate(
        degrees={"pp": pp},
        schedule={"csv_text": tp.to_csv(schedule)},
        collectives=PIPELINE_ONLY,
        **options,
    )
    return verdicts(trace)


# ----------------------------------------------------------------------------- agreement


@pytest.mark.parametrize(
    "name,pp,n", [("gpipe", 4, 6), ("interleaved", 4, 8), ("interleaved", 2, 4), ("zbv", 4, 8)]
)
def test_both_accept_torch_schedules(name: str, pp: int, n: int) -> None:
    compute = tp.without_reduce_grad(tp.pipeline_order(name, pp, n))
    comms = tp.add_send_recv(compute, name, pp)
    assert tp.simulate(comms, name, pp) is None
    # compute-only CSV (lowered by commlint) and compute+comms CSV (torch's lowering)
    assert gate(compute) == OK
    assert gate(comms) == OK
    assert gate(comms, p2p={"style": "torch", "blocking": True}) == OK


@pytest.mark.parametrize("name,pp,n", [("interleaved", 4, 8), ("interleaved", 2, 4), ("zbv", 4, 8)])
def test_torch_style_p2p_order_is_the_runtime_order(name: str, pp: int, n: int) -> None:
    """`p2p: torch` issues SEND/RECV in the order `_PipelineScheduleRuntime` runs them
    (`pipeline_order_with_comms`, where UNSHARD/RESHARD take turns in the lowering)."""
    runtime = tp.runtime_order(name, pp, n)
    expected = {
        r: [str(a) for a in acts if str(a)[len(str(a.stage_index)) :].startswith(("SEND", "RECV"))]
        for r, acts in runtime.items()
    }
    compute = tp.without_reduce_grad(tp.pipeline_order(name, pp, n))
    trace = generate(
        degrees={"pp": pp}, schedule={"csv_text": tp.to_csv(compute)}, collectives=PIPELINE_ONLY
    )
    for r in range(pp):
        got = [_as_torch(a.label) for a in trace.ranks[r] if a.op in ("isend", "irecv")]
        assert got == expected[r], r


def _as_torch(label: str) -> str:
    """`F3 stage 2 send activation` → `2SEND_F3`."""
    what, _, stage, direction, payload = label.split()
    kind = ("SEND_" if direction == "send" else "RECV_") + ("F" if payload == "activation" else "B")
    return f"{stage}{kind}{what[1:]}"


def test_dualpipev_overlapped_actions_and_its_runtime_order() -> None:
    """DualPipeV has OVERLAP_F_B cells; torch's simulator cannot run the runtime's own order
    (it rejects the UNSHARD steps the runtime inserts), commlint checks both forms."""
    compute = tp.pipeline_order("dualpipev", 4, 8)
    assert any("OVERLAP_F_B" in str(a) for a in compute[0])
    runtime = tp.runtime_order("dualpipev", 4, 8)
    err = tp.simulate(runtime, "dualpipev", 4)
    assert err is not None and "Unsupported action type" in err
    assert gate(compute) == OK
    assert gate(runtime) == OK


# ----------------------------------------------------------------------------- disagreement

H2H = """
0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
"""


def test_head_to_head_sends_torch_accepts_commlint_rejects() -> None:
    """Rank 0 sends F1 while rank 1 sends B0 before receiving F1 (pytorch issue 172668)."""
    schedule = order(H2H)
    assert tp.simulate(schedule, "gpipe", 2) is None  # sends never block in torch's model
    # async isend/irecv: fine on gloo; on one NCCL communicator per pair both sends queue
    # ahead of the receives the other side needs
    assert gate(schedule) == {"gloo": "ok", "nccl": ["CL201"], "single-queue": ["CL201"]}
    # a runtime with blocking sends deadlocks everywhere
    assert gate(schedule, p2p={"style": "torch", "blocking": True}) == {
        m: ["CL201"] for m in MODELS
    }


FIFO = """
0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
1RECV_F1 1RECV_F0 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1
"""


def test_out_of_order_receives_matched_by_name_vs_fifo() -> None:
    schedule = order(FIFO)
    assert tp.simulate(schedule, "gpipe", 2) is None  # RECV_F1 "matches" SEND_F1 by name
    trace = generate(
        degrees={"pp": 2}, schedule={"csv_text": tp.to_csv(schedule)}, collectives=PIPELINE_ONLY
    )
    # on the wire the first receive gets the first send: microbatch 0's activation lands in
    # the buffer posted for microbatch 1
    graph = compile_trace(trace, "gloo")
    pairs = []
    for members in graph.inst_members:
        labels = sorted(trace.ranks[graph.op_rank[o]][graph.op_action[o]].label for o in members)
        pairs.append(labels)
    assert ["F0 stage 0 send activation", "F1 stage 1 recv activation"] in pairs
    # same sizes: no hang, silently wrong data; different sizes: commlint reports it
    assert verdicts(trace) == OK
    sized = gate(schedule, activation={"shape": [128, 1, 8]}, seq_lengths=[128, 64])
    assert sized == {m: ["CL204", "CL210"] for m in MODELS}


EXTRA_SEND = """
0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0SEND_F1
1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1
"""


def test_unmatched_send_torch_accepts_commlint_reports_the_hang() -> None:
    schedule = order(EXTRA_SEND)
    assert tp.simulate(schedule, "gpipe", 2) is None  # an unmatched send is never checked
    # the runtime waits for its sends at the end of the step: nobody receives the last one
    assert gate(schedule) == {m: ["CL202"] for m in MODELS}


def test_torch_1f1b_pipeline_order_is_malformed_on_the_last_rank() -> None:
    compute = tp.without_reduce_grad(tp.pipeline_order("1f1b", 4, 8))
    with pytest.raises(AssertionError, match="Malformed compute schedule"):
        tp.add_send_recv(compute, "1f1b", 4)
    with pytest.raises(Exception, match="stage 0 never runs F for microbatch 8"):
        gate(compute)
    # commlint's own 1F1B, dumped to torch's CSV form, is accepted by both
    ours = {r: [tp.parse(str(s)) for s in row] for r, row in sch.one_f_one_b(4, 8).items()}
    assert tp.simulate(tp.add_send_recv(ours, "1f1b", 4), "1f1b", 4) is None
    assert gate(ours) == OK


def test_reduce_grad_unsupported_by_torch_simulator() -> None:
    compute = tp.pipeline_order("gpipe", 2, 2)  # torch appends REDUCE_GRAD itself
    err = tp.simulate(tp.add_send_recv(compute, "gpipe", 2), "gpipe", 2)
    assert err is not None and "Unsupported action type" in err
    # commlint models the gradient sync as collectives of its own (DP / FSDP)
    fsdp = generate(world_size=4, degrees={"pp": 2, "dp_shard": 2}, microbatches=2)
    assert verdicts(fsdp) == OK
    # and reads torch's own order as it is: REDUCE_GRAD carries no p2p
    assert gate(compute) == OK


@pytest.mark.parametrize(
    "mutation,options,code",
    [
        ("early_embedding_allreduce", {}, "CL201"),
        (
            {"kind": "last_microbatch", "dp_rank": 1, "microbatches": 7},
            {"collectives": {"dp": "fsdp"}},
            "CL203",
        ),
    ],
)
def test_collective_mistakes_are_invisible_to_torch(mutation, options, code: str) -> None:
    """torch simulates one pipeline's p2p; the mistake lives in collectives across groups."""
    compute = {r: [tp.parse(str(s)) for s in row] for r, row in sch.one_f_one_b(4, 8).items()}
    assert tp.simulate(tp.add_send_recv(compute, "1f1b", 4), "1f1b", 4) is None
    trace = generate(
        world_size=8, degrees={"pp": 4}, microbatches=8, mutations=[mutation], **options
    )
    assert verdicts(trace) == {m: [code] for m in MODELS}
