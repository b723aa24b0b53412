"""Every source rule's examples are its tests: each failing example yields the rule's code
(with a location, a fix and, for branch rules, the condition as a related location); each fixed
example yields no finding at all."""

from __future__ import annotations

import pytest

from commlint.rules import all_rules
from tests.lint.helpers import lint_source

SOURCE_RULES = [r for r in all_rules().values() if r.kind == "source"]
BRANCH_RULES = {"CL101", "CL102", "CL103", "CL108", "CL107", "CL109", "CL110"}


def _cases(kind: str):
    for rule in SOURCE_RULES:
        for k, ex in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, ex, id=f"{rule.code}-{kind}-{k}")


@pytest.mark.parametrize(("rule", "example"), list(_cases("invalid")))
def test_invalid_example_fires(rule, example, tmp_path):
    report = lint_source(example, tmp_path)
    hits = [f for f in report.findings if f.code == rule.code]
    assert hits, f"{rule.code} expected, got {[f.code for f in report.findings]}"
    for f in hits:
        assert f.severity == rule.severity
        assert f.fix and f.message
        assert f.path and f.line and f.col and f.end_line and f.end_col
        if rule.code in BRANCH_RULES:
            assert f.related and f.related[0].line and f.related[0].message


@pytest.mark.parametrize(("rule", "example"), list(_cases("valid")))
def test_valid_example_is_clean(rule, example, tmp_path):
    report = lint_source(example, tmp_path)
    assert [(f.code, f.line, f.message) for f in report.findings] == []


def test_every_source_rule_has_examples_and_a_check():
    assert SOURCE_RULES
    for rule in SOURCE_RULES:
        assert rule.invalid and rule.valid, rule.code
        assert rule.code.startswith("CL1")
