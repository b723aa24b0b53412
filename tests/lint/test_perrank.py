"""Per-rank evaluation (CL115-CL118): the world sizes it evaluates, one finding per root cause,
the taint findings it refutes, and the CL101 fix for a call that forgot `group=`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from commlint.findings import CommlintInputError
from commlint.lint.config import LintConfig, load_config
from tests.lint.helpers import lint_files, lint_source

# correct with an even number of ranks; with 3, rank 2 sends to a rank 3 that does not exist
ODD_WORLD = """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    t = torch.zeros(4)
    if rank % 2 == 0:
        dist.send(t, (rank + 1) % world)
    else:
        dist.recv(t, rank - 1)
"""


def _codes(report) -> list[tuple[str, int]]:
    return sorted((f.code, f.line) for f in report.findings)


def test_configured_world_sizes_are_evaluated(tmp_path: Path) -> None:
    assert _codes(lint_source(ODD_WORLD, tmp_path)) == []
    config = LintConfig(root=tmp_path, world_sizes=[3])
    report = lint_source(ODD_WORLD, tmp_path, config=config)
    hits = [f for f in report.findings if f.code == "CL115"]
    assert [f.line for f in hits] == [11]
    assert "with 3 ranks" in hits[0].message and "rank 2" in hits[0].message


def test_world_sizes_key_is_read_and_checked(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.commlint]\nworld-sizes = [3, 6, 3]\n")
    assert load_config([str(tmp_path)]).world_sizes == [3, 6]
    (tmp_path / "pyproject.toml").write_text('[tool.commlint]\nworld-sizes = ["four"]\n')
    with pytest.raises(CommlintInputError, match="world-sizes"):
        load_config([str(tmp_path)])


def test_the_size_the_file_declares_wins(tmp_path: Path) -> None:
    src = '"""Run: torchrun --nproc-per-node 3 train.py"""\n' + ODD_WORLD
    assert [f.code for f in lint_source(src, tmp_path).findings] == ["CL115"]
    src = '"""Run: torchrun --nproc-per-node 4 train.py"""\n' + ODD_WORLD
    config = LintConfig(root=tmp_path, world_sizes=[3])
    assert lint_source(src, tmp_path, config=config).findings == []


def test_a_cause_the_taint_rules_report_is_not_repeated(tmp_path: Path) -> None:
    src = """
import torch
import torch.distributed as dist

HEADS = ["h0", "h1", "h2", "h3", "h4"]


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    for head in HEADS[rank::world]:
        dist.all_reduce(torch.zeros(4))
"""
    assert [f.code for f in lint_source(src, tmp_path).findings] == ["CL101"]


def test_a_stage_collective_on_its_own_group_is_not_reported(tmp_path: Path) -> None:
    src = """
import torch
import torch.distributed as dist

DP = 2


def main():
    rank = dist.get_rank()
    world = dist.get_world_size()
    dp_group = None
    for s in range(world // DP):
        ranks = list(range(s * DP, (s + 1) * DP))
        g = dist.new_group(ranks)
        if rank in ranks:
            dp_group = g
    stage = rank // DP
    x = torch.zeros(4)
    if stage == 0:
        dist.all_reduce(x, group=dp_group)
"""
    assert lint_source(src, tmp_path).findings == []
    # the same branch on a group every stage shares is a real hang
    bad = src.replace("group=dp_group)", "group=None)")
    assert "CL101" in [f.code for f in lint_source(bad, tmp_path).findings]


def test_workers_that_leave_after_their_last_collective(tmp_path: Path) -> None:
    src = """
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.zeros(4)
    dist.all_reduce(t)
    if rank != 0:
        dist.destroy_process_group()
        return
    print("rank 0 writes the report", t)


if __name__ == "__main__":
    main()
"""
    assert lint_source(src, tmp_path).findings == []
    bad = src.replace('    print("rank 0', '    dist.barrier()\n    print("rank 0')
    assert "CL103" in [f.code for f in lint_source(bad, tmp_path).findings]


def test_uniform_data_test_is_refuted_but_a_loop_of_unknown_length_proves_nothing(
    tmp_path: Path,
) -> None:
    uniform = """
import torch
import torch.distributed as dist


def main():
    rank = dist.get_rank()
    probe = torch.rand(1)
    t = torch.zeros(4)
    if float(probe) >= 0.0:
        dist.all_reduce(t)
"""
    assert lint_source(uniform, tmp_path).findings == []
    per_rank = uniform.replace(">= 0.0", "> 0.5")
    assert [f.code for f in lint_source(per_rank, tmp_path).findings] == ["CL102"]
    shard = """
import torch.distributed as dist


def score(items, model):
    rank, world = dist.get_rank(), dist.get_world_size()
    for item in items[rank::world]:
        s = model(item).sum()
        dist.all_reduce(s)
"""
    assert [f.code for f in lint_source(shard, tmp_path).findings] == ["CL101"]


def test_helpers_called_from_other_files_are_left_to_their_callers(tmp_path: Path) -> None:
    comm = """
import torch.distributed as dist


def send_forward(t):
    if dist.get_rank() < dist.get_world_size() - 1:
        dist.send(t, dst=dist.get_rank() + 1)
"""
    caller = """
from comm import send_forward


def step(t):
    send_forward(t)
"""
    report = lint_files({"comm.py": comm, "schedule.py": caller}, tmp_path)
    assert [f.code for f in report.findings if f.code.startswith("CL11")] == []


def test_cl101_fix_for_a_forgotten_group_is_to_pass_it(tmp_path: Path) -> None:
    src = """
import torch.distributed as dist


def train(t):
    rank = dist.get_rank()
    tp = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.all_reduce(t)
"""
    (f,) = [f for f in lint_source(src, tmp_path).findings if f.code == "CL101"]
    assert "group=" in f.fix and "Pass the group" in f.fix
    with_group = src.replace("dist.all_reduce(t)", "dist.all_reduce(t, group=tp)")
    assert [f.code for f in lint_source(with_group, tmp_path).findings] == []


def test_user_code_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    src = f"""
import os
import torch.distributed as dist

open({str(marker)!r}, "w").write("x")
os.remove({str(tmp_path / "example.py")!r})


def main():
    if dist.get_rank() == 0:
        dist.barrier()
"""
    report = lint_source(src, tmp_path)
    assert not marker.exists() and (tmp_path / "example.py").exists()
    assert [f.code for f in report.findings] == ["CL101"]


def test_torch_zero_redundancy_optimizer_is_clean() -> None:
    spec = importlib.util.find_spec("torch")  # located, never imported
    path = Path(spec.origin).parent if spec and spec.origin else Path("/nonexistent")
    path = path / "distributed/optim/zero_redundancy_optimizer.py"
    if not path.exists():
        pytest.skip("torch source not installed")
    from commlint.lint.engine import LintOptions, lint_paths

    report = lint_paths([str(path)], LintConfig(root=path.parent), LintOptions(cache=False))
    assert [f.code for f in report.findings if f.severity == "error"] == []


def test_zero_consolidate_is_refuted_with_its_caller_in_another_file(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer.consolidate_state_dict with Lightning's strategy, which calls
    it, in the same run: the per-rank evaluation does not follow the caller into torch's file,
    so it evaluates the method there anyway (to refute, never to report) and its 3 CL101s stay
    refuted as when torch's file is checked alone."""
    torch_spec = importlib.util.find_spec("torch")  # located, never imported
    light_spec = importlib.util.find_spec("lightning")
    if not (torch_spec and torch_spec.origin and light_spec and light_spec.origin):
        pytest.skip("torch or lightning source not installed")
    zero = Path(torch_spec.origin).parent / "distributed/optim/zero_redundancy_optimizer.py"
    caller = Path(light_spec.origin).parent / "pytorch/strategies/strategy.py"
    assert "consolidate_state_dict" in caller.read_text()
    from commlint.lint.engine import LintOptions, lint_paths

    report = lint_paths(
        [str(zero), str(caller)], LintConfig(root=tmp_path), LintOptions(cache=False)
    )
    assert [(f.path, f.code) for f in report.findings if f.severity == "error"] == []
