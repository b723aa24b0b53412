"""Every trace rule's examples are its tests: each failing example yields the rule's code,
each fixed example yields no error at all."""

from __future__ import annotations

import pytest

from commlint.graph import check_trace
from commlint.plans.io import loads_trace
from commlint.rules import all_rules

TRACE_RULES = [r for r in all_rules().values() if r.kind == "trace"]


def _cases(kind: str):
    for rule in TRACE_RULES:
        for k, ex in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, ex, id=f"{rule.code}-{kind}-{k}")


@pytest.mark.parametrize(("rule", "example"), list(_cases("invalid")))
def test_invalid_example_fires(rule, example):
    result = check_trace(loads_trace(example), "all")
    codes = {f.code for f in result.findings}
    assert rule.code in codes, f"{rule.code} expected, got {sorted(codes)}"
    for f in result.findings:
        if f.code == rule.code:
            assert f.severity == rule.severity
            assert f.fix, "every finding says how to fix it"


@pytest.mark.parametrize(("rule", "example"), list(_cases("valid")))
def test_valid_example_is_clean(rule, example):
    result = check_trace(loads_trace(example), "all")
    assert [f.code for f in result.findings] == []


def test_every_trace_rule_has_examples():
    for rule in TRACE_RULES:
        assert rule.invalid and rule.valid, rule.code
        assert rule.code.startswith("CL2")
