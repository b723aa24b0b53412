"""Programs of the hidden recall set's families (issue 29), second round, written as training
code is written elsewhere: a config dataclass or argparse, a Trainer or helper class, helpers
in a second module. One directory per program under `recall/` (the first round's single files
sit beside them); each `main.py` says what a real run did (torchrun, gloo, CPU). Families:
`torch.distributed.pipelining` (a stage's `is_last`, `eval()`, losses only the last stage has),
DTensor on a 2-D mesh (`get_coordinate()`, `redistribute` through `dt.device_mesh`,
`DeviceMesh.from_group`, `_flatten`), FSDP2 (layer drop in a forward, `unshard()`,
`set_requires_gradient_sync`, full state dicts), DCP saves decided by a rank-local value, and
`all_to_all_single` output splits taken from a rank's own counts. A line marked
`# expect: CLnnn` must be reported; a directory without marks must be clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lint.helpers import RECALL as PROGRAMS
from tests.lint.helpers import lint_files, marked
from tests.lint.helpers import recall_files as _files

# (the `b_*` programs are test_recall_families_b.py's, which also asks for no input errors)
DIRS = sorted(
    p.name
    for p in PROGRAMS.iterdir()
    if p.is_dir() and (p / "main.py").exists() and not p.name.startswith("b_")
)


@pytest.mark.parametrize("name", DIRS)
def test_program_findings_are_the_marked_ones(name, tmp_path):
    files = _files(name)
    report = lint_files(files, tmp_path)
    found = sorted((Path(f.path).name, f.line, f.code) for f in report.findings)
    assert found == marked(files), [f.message for f in report.findings]


def test_every_buggy_program_has_a_correct_twin():
    """A bug and its fix side by side: the fix must stay clean (no false error)."""
    bugs = [n for n in DIRS if n.endswith("_bug")]
    assert len(bugs) >= 12
    for name in bugs:
        files = _files(name)
        assert "Real run" in files["main.py"], name
        errors = [e for e in marked(files) if e[2] not in ("CL105",)]
        assert errors, f"{name} marks no error"
    twins = [n for n in DIRS if n.endswith("_ok")]
    assert len(twins) >= len(bugs) - 1


def test_a_correct_twin_marks_no_error():
    for name in (n for n in DIRS if n.endswith("_ok")):
        codes = {code for _f, _line, code in marked(_files(name))}
        assert codes <= {"CL105"}, name  # a warning at most
