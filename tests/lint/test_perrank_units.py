"""The per-rank evaluation across files: which file an import means, and what a run through
several files reports (at the call in the evaluated file, with the chain)."""

from __future__ import annotations

from pathlib import Path

from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, lint_paths
from commlint.lint.ir import FileFacts
from commlint.lint.perrank_units import ModuleIndex


def _facts(*modules: str) -> list[FileFacts]:
    out = []
    for m in modules:
        path = m.replace(".", "/") + ".py"
        if m.endswith("__init__"):
            m = m.rsplit(".", 1)[0]
        out.append(FileFacts(path=path, module=m, functions={}))
    return out


def test_imports_resolve_as_python_resolves_them():
    index = ModuleIndex(
        _facts("app.main", "app.utils", "app.comm.__init__", "app.comm.ring", "other.utils")
    )
    # absolute, from the project's root
    assert index.find("app/main.py", "app.main", "app.utils", 0) == "app.utils"
    # relative: `from . import utils`, `from .comm import ring`, `from .. import x` in a package
    assert index.find("app/main.py", "app.main", "utils", 1) == "app.utils"
    assert index.find("app/main.py", "app.main", "comm.ring", 1) == "app.comm.ring"
    assert index.find("app/comm/__init__.py", "app.comm", "ring", 1) == "app.comm.ring"
    assert index.find("app/comm/ring.py", "app.comm.ring", "utils", 2) == "app.utils"
    # a script run from its own folder imports `utils`: the one beside it, not another package's
    assert index.find("app/main.py", "app.main", "utils", 0) == "app.utils"
    # libraries are not the project's
    assert index.find("app/main.py", "app.main", "torch.distributed", 0) is None
    # too many dots
    assert index.find("app/main.py", "app.main", "x", 5) is None


def _lint(root: Path) -> list:
    report = lint_paths([str(root)], LintConfig(root=root), LintOptions(cache=False))
    assert not report.errors
    return report.findings


def test_a_helper_in_a_package_is_followed_through_a_relative_import(tmp_path: Path):
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "sync.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def mean_loss(x):\n    t = torch.ones(1)\n    dist.all_reduce(t)\n    return t\n",
        encoding="utf-8",
    )
    (pkg / "loop.py").write_text(
        "import torch.distributed as dist\n\nfrom .sync import mean_loss\n\n\n"
        "def run(rank):\n"
        "    if rank == 0:\n"
        "        mean_loss(1.0)\n"
        "    dist.barrier()\n\n\n"
        'if __name__ == "__main__":\n'
        '    dist.init_process_group("gloo")\n'
        "    run(dist.get_rank())\n",
        encoding="utf-8",
    )
    found = [(Path(f.path).name, f.line, f.code) for f in _lint(tmp_path)]
    assert ("loop.py", 8, "CL115") in found or ("loop.py", 8, "CL101") in found, found
    # reported once, at the call under the condition, not inside the innocent helper
    assert not [f for f in found if f[0] == "sync.py"], found


def test_the_chain_into_another_file_is_named(tmp_path: Path):
    (tmp_path / "metrics.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "class Meter:\n"
        "    def close(self):\n"
        "        t = torch.ones(1)\n"
        "        dist.all_reduce(t)\n",
        encoding="utf-8",
    )
    # the count of calls is per rank (3 tasks round-robin over the ranks): only an
    # evaluation of each rank, through the other file, sees it
    (tmp_path / "main.py").write_text(
        "import torch.distributed as dist\n\nfrom metrics import Meter\n\n\n"
        "def owned(n):\n"
        "    return [t for t in range(n) if t % dist.get_world_size() == dist.get_rank()]\n\n\n"
        "def main():\n"
        '    dist.init_process_group("gloo")\n'
        "    meter = Meter()\n"
        "    for _task in owned(3):\n"
        "        meter.close()\n"
        "    dist.barrier()\n\n\n"
        'if __name__ == "__main__":\n    main()\n',
        encoding="utf-8",
    )
    (f,) = [f for f in _lint(tmp_path) if f.code == "CL115"]
    assert Path(f.path).name == "main.py" and f.line == 14
    assert "metrics.py:8" in f.message and "`Meter.close`" in f.message
