"""Communication calls are found however they are imported or reached, and rank sources are
recognised in every usual spelling."""

from __future__ import annotations

import pytest

from tests.lint.helpers import lint_source

CALLS = {
    "alias": ("import torch.distributed as dist", "dist.all_reduce(t)"),
    "full": ("import torch.distributed", "torch.distributed.all_reduce(t)"),
    "from-import-as": ("from torch.distributed import all_reduce as ar", "ar(t)"),
    "from-torch-import": ("from torch import distributed as D", "D.barrier()"),
    "c10d": ("import torch.distributed.distributed_c10d as c10d", "c10d.broadcast(t, src=0)"),
    "funcol": (
        "import torch.distributed._functional_collectives as funcol",
        "t = funcol.all_reduce(t, 'sum', group)",
    ),
    "deepspeed-comm": ("import deepspeed.comm as dist", "dist.all_reduce(t)"),
    "mesh-group": (
        "import torch.distributed as dist",
        "dist.all_reduce(t, group=mesh.get_group('dp'))",
    ),
    "accelerate-util": ("from accelerate.utils import gather", "t = gather(t)"),
    "wait-for-everyone": (
        "from accelerate import Accelerator\nacc = Accelerator()",
        "acc.wait_for_everyone()",
    ),
}


@pytest.mark.parametrize("case", sorted(CALLS))
def test_call_is_resolved_however_imported(case, tmp_path):
    imports, call = CALLS[case]
    src = (
        f"import torch.distributed\n{imports}\n\n\ndef f(t, group, mesh):\n"
        f"    if torch.distributed.get_rank() == 0:\n        {call}\n"
    )
    report = lint_source(src, tmp_path)
    assert [f.code for f in report.findings if f.code == "CL101"] == ["CL101"], src


RANKS = {
    "env": "int(os.environ['RANK']) == 0",
    "env-get": "os.environ.get('LOCAL_RANK') == '0'",
    "getenv": "os.getenv('SLURM_PROCID') == '0'",
    "args": "args.local_rank == 0",
    "self-attr": "self.rank == 0",
    "helper": "is_main_process()",
    "accel-attr": "accelerator.is_local_main_process",
    "group-rank": "dist.get_rank(group) == 0",
    "ternary-role": "('a' if dist.get_rank() else 'b') == 'a'",
    "len-of-shard": "len(items[dist.get_rank()::2]) > 3",
}


@pytest.mark.parametrize("case", sorted(RANKS))
def test_rank_sources(case, tmp_path):
    cond = RANKS[case]
    src = (
        "import os\nimport torch.distributed as dist\n\n\nclass T:\n"
        "    def f(self, args, accelerator, items, group, t):\n"
        f"        if {cond}:\n            dist.all_reduce(t, group=group)\n"
    )
    report = lint_source(src, tmp_path)
    assert [f.code for f in report.findings] == ["CL101"], (src, report.findings)


UNIFORM = {
    "world-size": "dist.get_world_size() > 1",
    "initialized": "dist.is_initialized()",
    "step": "step % 100 == 0",
    "reduced-flag": "flag.item() > 0",
    "sentinel": "int(os.environ.get('LOCAL_RANK', -1)) != -1",
}


@pytest.mark.parametrize("case", sorted(UNIFORM))
def test_uniform_conditions_are_not_findings(case, tmp_path):
    cond = UNIFORM[case]
    src = (
        "import os\nimport torch.distributed as dist\n\n\n"
        "def f(t, step, flag):\n    dist.all_reduce(flag)\n"
        f"    if {cond}:\n        dist.all_reduce(t)\n"
    )
    assert lint_source(src, tmp_path).findings == []


def test_ternary_collective(tmp_path):
    src = (
        "import torch.distributed as dist\n\n\ndef f(t):\n"
        "    return dist.all_reduce(t) if dist.get_rank() == 0 else None\n"
    )
    (f,) = lint_source(src, tmp_path).findings
    assert f.code == "CL101" and f.line == 5


def test_rank_dependent_mesh_creation(tmp_path):
    src = (
        "import torch.distributed as dist\n"
        "from torch.distributed.device_mesh import init_device_mesh\n\n\n"
        "def f():\n    if dist.get_rank() < 4:\n"
        "        return init_device_mesh('cuda', (2, 2), mesh_dim_names=('dp', 'tp'))\n"
        "    return None\n"
    )
    assert [f.code for f in lint_source(src, tmp_path).findings] == ["CL108"]


HELPER = (
    "import torch.distributed as dist\n\n\n"
    "def reduce(t, group=None):\n    dist.all_reduce(t, group=group)\n\n\n"
    "def step(t, tp_group, dp_group):\n    if dist.get_rank(dp_group) == 0:\n"
    "        reduce(t, {arg})\n"
)


@pytest.mark.parametrize(
    ("arg", "expected"),
    [("tp_group", []), ("dp_group", ["CL101"]), ("group=dp_group", ["CL101"]), ("", ["CL101"])],
)
def test_group_parameters_are_substituted_at_call_sites(arg, expected, tmp_path):
    src = HELPER.format(arg=arg).replace("reduce(t, )", "reduce(t)")
    assert [f.code for f in lint_source(src, tmp_path).findings] == expected, src


def test_reduced_digests_compared_with_torch_equal_are_uniform(tmp_path):
    src = (
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def check(digest, group):\n    hi, lo = digest.clone(), digest.clone()\n"
        "    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)\n"
        "    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)\n"
        "    if not torch.equal(hi, lo):\n        dist.barrier(group=group)\n"
    )
    assert lint_source(src, tmp_path).findings == []


def test_megatron_single_stage_idiom_is_uniform(tmp_path):
    src = (
        "import torch.distributed as dist\nfrom megatron.core import parallel_state as ps\n\n\n"
        "def f(t):\n"
        "    pipelined = not (ps.is_pipeline_first_stage() and ps.is_pipeline_last_stage())\n"
        "    if pipelined:\n"
        "        dist.broadcast(t, src=0, group=ps.get_pipeline_model_parallel_group())\n"
    )
    codes = [f.code for f in lint_source(src, tmp_path).findings]
    assert "CL101" not in codes


BASE = """\
# the launcher process, not a distributed rank
class MultiProcessTestCase:
    MAIN_PROCESS_RANK = {value}
"""

SUBCLASS = """\
import torch.distributed as dist

from testing.common import MultiProcessTestCase


class FSDPTest(MultiProcessTestCase):
    def setUp(self):
        if self.rank != self.MAIN_PROCESS_RANK:
            dist.barrier()
"""


@pytest.mark.parametrize(("value", "codes"), [("-1", []), ("0", ["CL101"])])
def test_a_base_class_constant_from_another_file_decides_a_rank_test(value, codes, tmp_path):
    """torch's common_fsdp: `self.rank != self.MAIN_PROCESS_RANK` with the constant -1 on a
    base class in another file holds on every rank (no rank is negative); with 0 it is a
    rank test like any other."""
    from tests.lint.helpers import lint_files

    report = lint_files(
        {
            "testing/__init__.py": "",
            "testing/common.py": BASE.format(value=value),
            "testing/fsdp.py": SUBCLASS,
        },
        tmp_path,
    )
    assert [f.code for f in report.findings] == codes
