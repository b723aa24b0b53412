"""The API table's argument positions agree with the real torch signatures (torch 2.13);
the linter itself never imports torch."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from commlint.lint.table import build_table

TABLE = build_table()


def _torch_entries():
    for name, fact in sorted(TABLE.calls.items()):
        if name.startswith(("torch.distributed.", "funcol.")) and fact.kind != "create":
            yield pytest.param(name, fact, id=name)


@pytest.mark.parametrize(("name", "fact"), list(_torch_entries()))
def test_argument_positions_match_torch(name, fact):
    torch_dist = pytest.importorskip("torch.distributed")
    if name.startswith("funcol."):
        import torch.distributed._functional_collectives as module

        attr = name.split(".", 1)[1]
    else:
        module, attr = torch_dist, name.rsplit(".", 1)[1]
    fn = getattr(module, attr, None)
    if fn is None:
        pytest.skip(f"{name} not in this torch")
    params = list(inspect.signature(fn).parameters)
    for spec in (fact.group, fact.root, fact.group_root, fact.async_):
        if spec is None:
            continue
        pos, kw = spec
        if kw is not None:
            assert kw in params, f"{name}: no parameter {kw!r} in {params}"
        if pos is not None:
            assert params[pos] == kw, f"{name}: position {pos} is {params[pos]!r}, not {kw!r}"


def test_linter_never_imports_torch(tmp_path):
    (tmp_path / "a.py").write_text(
        "import torch.distributed as dist\n\ndef f(t):\n    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n"
    )
    code = (
        "import sys\nfrom commlint.cli import main\n"
        f"rc = main(['check', '--no-cache', {str(tmp_path)!r}])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nsys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "CL101" in proc.stdout


def test_aliases_resolve_deepspeed_and_c10d():
    assert TABLE.call("deepspeed.comm.all_reduce").op == "all_reduce"
    assert TABLE.call("torch.distributed.distributed_c10d.broadcast").root == (1, "src")
    assert TABLE.group_getter("megatron.core.mpu.get_data_parallel_group")["group"] == (
        "megatron.dp"
    )
    assert TABLE.call("torch.distributed.all_reduce_typo") is None
