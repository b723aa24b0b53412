"""nnScaler: generated gencode{rank}.py read statically, and the execution-plan gate."""

from __future__ import annotations

import sys

import nnscaler_gen as gen
import pytest

from commlint import check
from commlint.cli import main
from commlint.findings import CommlintInputError
from commlint.plans.importers import detect_format, load_nnscaler
from commlint.plans.importers.nnscaler import (
    PlanRejected,
    gate_execution_plan,
    install_codegen_gate,
    plan_to_trace,
    read_gencode,
)


def line_of(path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_tp_dp_plan_reads_groups_adapters_and_reducers(tmp_path):
    folder = gen.tp_dp(tmp_path / "ok")
    assert detect_format(folder) == "nnscaler"
    g0 = read_gencode(folder / "gencode0.py")
    assert g0.rank == 0 and g0.world_size == 4
    assert g0.groups == [[0, 2], [1, 3], [0, 1], [2, 3]]
    assert g0.reducers == {"wreducer80": [0, 2]} and g0.reducer_order == ["wreducer80"]
    trace = load_nnscaler(folder)
    ops = [(a.op, a.group, a.label) for a in trace.ranks[3]]
    assert ops == [
        ("all_reduce", "ranks2_3", "nnscaler.runtime.adapter.nn.allreduce_identity"),
        # backward halves, in reverse order of the forward calls
        ("all_reduce", "ranks2_3", "nnscaler.runtime.adapter.nn.identity_allreduce (backward)"),
        ("all_gather", "ranks2_3", "nnscaler.runtime.adapter.nn.split_allgather (backward)"),
        ("all_reduce", "ranks1_3", "wreducer80.sync_grads()"),
    ]
    assert (
        trace.ranks[3][0].site
        == f"{folder / 'gencode3.py'}:{line_of(folder / 'gencode3.py', 'allreduce_identity')}"
    )
    assert [f.code for f in check(trace, "all").findings] == []


def test_tp_rank_with_a_different_adapter_is_a_mismatch(tmp_path):
    folder = gen.tp_dp(tmp_path / "bad", tp_ops={1: "allgather_split"})
    findings = check(load_nnscaler(folder), "nccl").findings
    assert [f.code for f in findings] == ["CL203"]
    sites = {a.rank: a.site for a in findings[0].actions}
    g1 = folder / "gencode1.py"
    assert sites[1] == f"{g1}:{line_of(g1, 'nn.allgather_split')}"


def test_end_to_end_pipeline_in_1f1b_order_is_clean(tmp_path):
    folder = gen.pipeline(tmp_path / "pp", microbatches=3)
    trace = load_nnscaler(folder)
    assert [a.op for a in trace.ranks[1]] == ["recv", "send"] * 3
    stack = trace.ranks[0][0].stack[0]
    assert stack.endswith("in _train_step") and "gencode0.py:" in stack
    assert [f.code for f in check(trace, "all").findings] == []


def test_blocking_moves_facing_each_other_deadlock(tmp_path):
    folder = gen.pipeline(tmp_path / "bad", microbatches=2, blocking_head_to_head=True)
    f = [f for f in check(load_nnscaler(folder), "nccl").findings if f.code == "CL201"]
    assert len(f) == 1
    assert [(e.rank, e.op) for e in f[0].cycle] == [(0, "send(→1)"), (1, "send(→0)")]
    assert "gencode0.py" in f[0].cycle[0].site and "gencode1.py" in f[0].cycle[1].site


def test_async_moves_wait_at_the_consumer(tmp_path):
    folder = gen.pipeline(tmp_path / "async", microbatches=1)
    for name in ("gencode0.py", "gencode1.py"):
        path = folder / name
        path.write_text(path.read_text().replace("src=0, dst=1)", "src=0, dst=1, async_op=True)"))
    trace = load_nnscaler(folder)
    ops1 = [a.op for a in trace.ranks[1]]
    assert ops1[:2] == ["irecv", "wait"]  # waited before segment35 consumes it
    assert trace.ranks[0][-1].op == "wait"  # nnScaler never waits isends: drained at the end
    assert [f.code for f in check(trace, "all").findings] == []


def test_bad_gencode_is_a_located_error(tmp_path):
    folder = gen.tp_dp(tmp_path / "x")
    path = folder / "gencode2.py"
    text = path.read_text().replace("ranks=[2, 3])\n        w_22", "ranks=tp_ranks)\n        w_22")
    path.write_text(text)
    with pytest.raises(CommlintInputError) as exc:
        load_nnscaler(folder)
    assert str(exc.value) == (
        f"{path}:{line_of(path, 'ranks=tp_ranks')}: "
        "nn.split_allgather() without literal ranks=[...]"
    )
    path.write_text("def broken(:\n")
    with pytest.raises(CommlintInputError, match="invalid Python"):
        load_nnscaler(folder)


def test_cli_on_gencode_folder(tmp_path, capsys):
    folder = gen.tp_dp(tmp_path / "bad", tp_ops={1: "allgather_split"})
    assert main(["plan", str(folder), "--input-format", "nnscaler", "--format", "json"]) == 1
    assert '"CL203"' in capsys.readouterr().out


def test_importing_the_reader_does_not_import_torch_or_nnscaler(tmp_path):
    import subprocess

    code = (
        "import sys; from commlint.plans.importers import load_nnscaler;"
        f"load_nnscaler({str(gen.tp_dp(tmp_path / 'z'))!r});"
        "print('torch' in sys.modules, 'nnscaler' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


# --- the gate on nnScaler's execution plan (duck-typed: nnScaler is not installed) ---------


class MovePrim:
    def __init__(self, src: int, dst: int, async_op: bool = False) -> None:
        self.signature = "nnscaler.runtime.adapter.move"
        self.kwargs = {"src": src, "dst": dst, "async_op": async_op}


class AllReducePrim:
    def __init__(self, ranks: list[int]) -> None:
        self.signature = "nnscaler.runtime.adapter.all_reduce"
        self.kwargs = {"ranks": ranks}


class AllGatherPrim:
    def __init__(self, ranks: list[int]) -> None:
        self.signature = "nnscaler.runtime.adapter.all_gather"
        self.kwargs = {"ranks": ranks, "dim": 0}


class IRAdapter:
    def __init__(self, *prims, name: str = "adapter") -> None:
        self.prims = list(prims)
        self.name = name


class IRSegment:
    def __init__(self, *nodes, name: str = "segment") -> None:
        self._nodes = list(nodes)
        self.name = name

    def nodes(self):
        return list(self._nodes)


class IRWeightReducer:
    def __init__(self, device: list[int]) -> None:
        self.device = device


class ExeReuseCell:
    def __init__(self, cell) -> None:
        self.cell = cell


class ExecutionPlan:
    def __init__(self, seqs: dict[int, list]) -> None:
        self.seqs = seqs

    def devices(self):
        return list(self.seqs)

    def seq(self, device: int):
        return self.seqs[device]


def two_stage_plan(parity: bool) -> ExecutionPlan:
    """Stage 0 on device 0, stage 1 on device 1, one activation and one gradient move; with
    `parity=False` both stages send first (blocking), as Megatron-LM issue 5100."""
    fwd = IRAdapter(MovePrim(0, 1), name="fwd")
    bwd = IRAdapter(MovePrim(1, 0), name="bwd")
    fwd2 = IRAdapter(MovePrim(0, 1), name="fwd2")
    stage0 = IRSegment(name="stage0")  # compute only
    seq0 = [stage0, fwd, bwd, fwd2] if parity else [stage0, fwd, fwd2, bwd]
    seq1 = [fwd, bwd, fwd2]
    return ExecutionPlan(
        {0: [*seq0, IRWeightReducer([0, 1])], 1: [*seq1, ExeReuseCell(IRWeightReducer([0, 1]))]}
    )


def test_gate_passes_a_good_plan_and_returns_its_trace():
    trace = gate_execution_plan(two_stage_plan(parity=True))
    assert trace.source == "nnscaler-execplan"
    assert [a.op for a in trace.ranks[0]] == ["send", "recv", "send", "all_reduce"]
    assert [a.op for a in trace.ranks[1]] == ["recv", "send", "recv", "all_reduce"]
    assert trace.ranks[0][1].stack == ["seq(0)[2] IRAdapter bwd"]


def test_gate_rejects_head_to_head_sends_before_codegen():
    with pytest.raises(PlanRejected) as exc:
        gate_execution_plan(two_stage_plan(parity=False))
    assert [f.code for f in exc.value.findings] == ["CL201"]
    assert "rejected the nnScaler plan before code generation" in str(exc.value)
    blocked = exc.value.findings[0].cycle[0]
    assert exc.value.trace.ranks[blocked.rank][blocked.action].stack == ["seq(0)[2] IRAdapter fwd2"]


def test_gate_rejects_a_collective_mismatch():
    plan = ExecutionPlan(
        {
            0: [IRSegment(IRAdapter(AllReducePrim([0, 1])))],
            1: [IRSegment(IRAdapter(AllGatherPrim([0, 1])))],
        }
    )
    with pytest.raises(PlanRejected) as exc:
        gate_execution_plan(plan)
    assert [f.code for f in exc.value.findings] == ["CL203"]
    # a custom predicate can let it through (e.g. a search loop that only cares about cycles)
    gate_execution_plan(plan, fail_on=lambda f: f.code == "CL201")


def test_install_codegen_gate_wraps_module_codegen():
    written = []

    class ModuleCodeGen:
        def __init__(self, execplan, runtime_ndevs=None):
            written.append(execplan)

    uninstall = install_codegen_gate(ModuleCodeGen)
    ModuleCodeGen(two_stage_plan(parity=True), runtime_ndevs=2)
    with pytest.raises(PlanRejected):
        ModuleCodeGen(two_stage_plan(parity=False))
    assert len(written) == 1  # the rejected plan never reached code generation
    uninstall()
    ModuleCodeGen(two_stage_plan(parity=False))
    assert len(written) == 2


def test_plan_needs_devices():
    class NoDevices:
        def seq(self, device):
            return []

    with pytest.raises(ValueError, match="no devices"):
        plan_to_trace(NoDevices())
    assert plan_to_trace(NoDevices(), devices=[0, 1]).world_size == 2


def test_a_move_to_itself_is_an_input_error_naming_the_file(tmp_path):
    folder = gen.pipeline(tmp_path / "self", microbatches=1)
    path = folder / "gencode0.py"
    path.write_text(path.read_text().replace("src=0, dst=1)", "src=0, dst=0)"))
    with pytest.raises(CommlintInputError) as exc:
        load_nnscaler(folder)
    assert str(exc.value).startswith(f"{path}: rank 0, action 0 ({path}:")
    assert str(exc.value).endswith("send to itself (peer 0)")
    plan = ExecutionPlan({0: [IRAdapter(MovePrim(0, 0))], 1: []})
    with pytest.raises(CommlintInputError, match="send to itself"):
        gate_execution_plan(plan)
