"""The committed rule pages docs/rules/CL*.md are exactly what `python -m commlint.rules.docs`
renders from the rule modules (regenerate with `python -m commlint.rules.docs docs/rules`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlint.rules import all_rules
from commlint.rules.docs import render

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"


@pytest.mark.parametrize("rule", list(all_rules().values()), ids=lambda r: r.code)
def test_committed_page_is_current(rule):
    page = DOCS / f"{rule.code}.md"
    assert page.is_file(), f"missing {page}; run python -m commlint.rules.docs docs/rules"
    assert page.read_text(encoding="utf-8") == render(rule), (
        f"{page} is stale; run python -m commlint.rules.docs docs/rules"
    )


def test_index_lists_every_rule():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for code in all_rules():
        assert f"[{code}]({code}.md)" in index
