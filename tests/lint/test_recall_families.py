"""Programs of the families a hidden recall set probes (issue 29), written in the styles real
training code uses: DTensor on a 2-D DeviceMesh, FSDP modules reached through helpers, a
`try` whose handler swallows an error that only some ranks raise. Each file marks the lines
it expects a finding on (`# expect: CLnnn`); a file without marks must be clean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commlint.lint.perrank_mesh import MeshView, coordinates
from tests.lint.helpers import lint_files

PROGRAMS = Path(__file__).parent / "recall"
EXPECT = re.compile(r"#\s*expect:\s*(CL\d+)")


def _expected(text: str) -> list[tuple[int, str]]:
    lines = enumerate(text.splitlines(), 1)
    return sorted((k, m.group(1)) for k, line in lines for m in EXPECT.finditer(line))


@pytest.mark.parametrize("name", sorted(p.name for p in PROGRAMS.glob("*.py")))
def test_program_findings_are_the_marked_ones(name, tmp_path):
    text = (PROGRAMS / name).read_text(encoding="utf-8")
    report = lint_files({name: text}, tmp_path)
    found = sorted((f.line, f.code) for f in report.findings)
    assert found == _expected(text), [f.message for f in report.findings]


def test_every_family_has_a_failing_and_a_correct_program():
    names = [p.name for p in PROGRAMS.glob("*.py")]
    for family in ("dtensor", "fsdp", "try"):
        texts = [(PROGRAMS / n).read_text() for n in names if n.startswith(family)]
        assert any(_expected(t) for t in texts), family
        assert any(not _expected(t) for t in texts), family


def test_mesh_coordinates_are_row_major_over_the_world():
    # torch lays a (2, 2) mesh out as [[0, 1], [2, 3]]: dp is the row, tp the column
    assert [coordinates((2, 2), r) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert coordinates((2, 3, 2), 7) == (1, 0, 1)


def test_mesh_dimension_arguments():
    mesh = MeshView((2, 4), ("dp", "tp"), (0, 1))
    assert mesh.dim_index("tp") == 1
    assert mesh.dim_index(0) == 0
    assert mesh.dim_index(None) is None  # a 2-D mesh needs its dimension named
    assert MeshView((2, 4), ("dp", "tp"), (1,)).dim_index(None) == 1
    assert MeshView((2, 4), ("dp", "tp"), (1,)).dim_index("dp") is None
