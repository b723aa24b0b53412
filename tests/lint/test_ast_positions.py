"""Findings keep their line/column semantics now that the extractor reads CPython's `ast`:
columns count characters (ast's count UTF-8 bytes), a call's position is its own (not its
decorator's, not its parentheses'), and a multi-line call is reported where it starts."""

from __future__ import annotations

from pathlib import Path

from tests.lint.helpers import lint_source

HEAD = "import torch.distributed as dist\n\n\n"


def _located(text: str, tmp_path: Path) -> list[tuple[str, int, int, int, int]]:
    report = lint_source(HEAD + text, tmp_path)
    return sorted(
        (f.code, f.line, f.col, f.end_line or 0, f.end_col or 0)
        for f in report.findings
        if f.code == "CL101"
    )


def test_columns_count_characters_not_bytes(tmp_path: Path) -> None:
    # "ünïcödé" is 7 characters and 11 UTF-8 bytes: the call spans characters 28-45
    found = _located(
        'def f(x):\n    if dist.get_rank() == 0:\n        label = "ünïcödé"; dist.all_reduce(x)\n',
        tmp_path,
    )
    assert [(line, col, end_col) for _, line, col, _, end_col in found] == [(6, 28, 46)]


def test_multi_line_call_and_parentheses(tmp_path: Path) -> None:
    found = _located(
        "def f(x, grp):\n"
        "    if (dist.get_rank() == 0):\n"
        "        (dist.all_reduce(  # the call's own parentheses are not its position\n"
        "            (x),\n"
        "            group=grp,\n"
        "        ))\n",
        tmp_path,
    )
    assert [(line, col, end_line, end_col) for _, line, col, end_line, end_col in found] == [
        (6, 10, 9, 10)
    ]


def test_decorated_function_reports_the_call_line(tmp_path: Path) -> None:
    found = _located(
        "@some.decorator(\n"
        "    option=1,\n"
        ")\n"
        "def f(x):\n"
        "    if dist.get_rank() == 0:\n"
        "        dist.barrier()\n",
        tmp_path,
    )
    assert [(line, col) for _, line, col, _, _ in found] == [(9, 9)]


def test_a_block_written_after_its_colon_is_analysed(tmp_path: Path) -> None:
    """`if rank == 0: dist.barrier()` on one line: the LibCST-based extractor passed such a block
    by (only the per-rank evaluator saw it); now the condition's own finding is at the call."""
    found = _located(
        "def f(x):\n"
        "    if dist.get_rank() == 0: dist.barrier()\n"
        "    for _ in range(2): dist.all_reduce(x)\n",
        tmp_path,
    )
    assert [(line, col) for _, line, col, _, _ in found] == [(5, 30)]
