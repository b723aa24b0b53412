"""One-way floors (STYLE.md): trace/findings <- graph <- front ends <- report <- commands.

Each check imports modules in a fresh interpreter and reads `sys.modules`, so a module-level
import anywhere along the chain that reaches a higher floor fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import commlint

PACKAGE = Path(commlint.__file__).parent


def loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def under(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def modules_of(folder: str) -> list[str]:
    return sorted(
        f"commlint.{folder}.{p.stem}"
        for p in (PACKAGE / folder).glob("*.py")
        if p.stem != "__init__"
    )


def test_package_root_loads_nothing_until_used():
    mods = loaded_after("import commlint")
    assert under(mods, "commlint") == ["commlint", "commlint._version"]
    mods = loaded_after("import commlint\ncommlint.Trace")
    assert "commlint.trace" in mods and not under(mods, "commlint.graph", "commlint.plans")


def test_linter_and_report_formats_never_load_checker_or_plans():
    imports = "\n".join(f"import {m}" for m in ["commlint.lint.engine", *modules_of("report")])
    mods = loaded_after(imports)
    assert "commlint.lint.engine" in mods and "commlint.report.sarif" in mods
    assert under(mods, "commlint.graph", "commlint.plans", "networkx", "torch") == []


def test_checker_never_loads_front_ends_reports_or_commands():
    mods = loaded_after("\n".join(f"import {m}" for m in modules_of("graph")))
    assert "commlint.graph.reorder" in mods
    assert (
        under(mods, "commlint.plans", "commlint.lint", "commlint.report", "commlint.commands") == []
    )


@pytest.mark.parametrize("argv", [["check", "--help"], ["--version"]])
def test_command_line_start_up_skips_the_checker(argv):
    code = (
        "import sys\nfrom commlint.cli import build_parser\n"
        f"try:\n    build_parser().parse_args({argv!r})\nexcept SystemExit:\n    pass"
    )
    mods = loaded_after(code)
    assert under(mods, "commlint.graph", "networkx", "libcst") == []


def test_reorder_command_line_lives_in_the_command_layer(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(
        "version: 1\nworld_size: 2\nranks:\n  0: [{op: all_reduce}]\n  1: [{op: all_reduce}]\n"
    )
    for module in ("commlint.commands.reorder", "commlint.graph.reorder"):
        out = subprocess.run(
            [sys.executable, "-m", module, str(plan), str(tmp_path / "missing.yaml")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2
        assert "safe, also under every legal reordering" in out.stdout
        assert "missing.yaml" in out.stderr and "Traceback" not in out.stderr
    assert not hasattr(__import__("commlint.graph.reorder").graph.reorder, "main")


def test_cached_check_never_loads_the_parser_or_the_dry_run(tmp_path):
    """pre-commit's usual run: every file's facts are in the cache, so LibCST and the
    extractor stay unloaded; the dry-run's modules never load for `check`."""
    (tmp_path / "train.py").write_text(
        "import torch.distributed as dist\n\n\ndef step(x):\n    if dist.get_rank() == 0:\n"
        "        dist.all_reduce(x)\n"
    )
    code = (
        "import os, sys\nos.chdir(sys.argv[1])\nfrom commlint.cli import main\n"
        "code = main(['check', '--output-format', 'concise', 'train.py'])\n"
        "import json\nprint(json.dumps([code, sorted(sys.modules)]))"
    )

    def run() -> tuple[int, set[str]]:
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        exit_code, mods = json.loads(out.stdout.splitlines()[-1])
        assert "train.py:6" in out.stdout  # the finding is still reported from the cache
        return exit_code, set(mods)

    first, cold = run()
    assert first == 1 and "libcst" in cold and "commlint.lint.extract" in cold
    second, warm = run()
    assert second == 1
    assert under(warm, "libcst", "commlint.lint.extract", "commlint.plans") == []
