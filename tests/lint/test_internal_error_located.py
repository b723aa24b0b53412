"""A bug in one rule is an internal error that names the file it failed on; the other rules'
findings are still reported."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from commlint.lint.config import LintConfig
from commlint.lint.engine import LintOptions, lint_paths
from commlint.rules import all_rules


def test_a_rule_that_crashes_on_one_file_names_it(tmp_path: Path, monkeypatch):
    good = tmp_path / "good.py"
    good.write_text(
        "import torch.distributed as dist\n\n\ndef f(t):\n"
        "    if dist.get_rank() == 0:\n        dist.all_reduce(t)\n",
        encoding="utf-8",
    )
    boom = tmp_path / "boom.py"
    boom.write_text("import torch.distributed as dist\n", encoding="utf-8")
    rules = all_rules()
    real = rules["CL105"].check

    def crashing(program):
        if any(ff.path.endswith("boom.py") for ff in program.files):
            raise KeyError("simulated bug")
        return real(program)

    monkeypatch.setitem(rules, "CL105", dataclasses.replace(rules["CL105"], check=crashing))
    report = lint_paths(
        [str(good), str(boom)], LintConfig(root=tmp_path), LintOptions(cache=False, jobs=1)
    )
    (error,) = report.errors
    assert error.path == str(boom)
    assert "internal error in rule CL105: KeyError" in error.message
    assert [f.code for f in report.findings] == ["CL101"]  # the other rules still ran
