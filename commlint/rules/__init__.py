"""The rule catalog: one small module per rule, discovered automatically.

A rule module defines `RULE = Rule(...)`: its code, name, one-line summary, explanation,
failing (`invalid`) and fixed (`valid`) examples — which are both its tests and its docs page —
and, for source rules, the check the linter runs. Trace rules (CL2xx) are decided by the
checker in `commlint.graph`; their modules carry the catalog entry and the examples.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import cache
from typing import Literal


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    explanation: str
    severity: Literal["error", "warning"]
    kind: Literal["source", "trace"]
    invalid: tuple[str, ...] = ()
    valid: tuple[str, ...] = ()
    fix: str = ""
    check: object | None = field(default=None, compare=False, hash=False)


@cache
def all_rules() -> dict[str, Rule]:
    """Every registered rule by code, in code order."""
    found: dict[str, Rule] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("cl"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules = getattr(module, "RULES", None) or [module.RULE]
        for rule in rules:
            if rule.code in found:
                raise RuntimeError(f"rule code {rule.code} registered twice")
            found[rule.code] = rule
    return dict(sorted(found.items()))


@cache
def rule_of(code: str) -> Rule:
    """The rule with this code, loading only its own module (`clNNN_*.py`): the checker and
    the guard name trace rules without loading what source rules need (the linter).
    KeyError for a code no rule has."""
    code = code.upper()
    prefix = f"{code.lower()}_"
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith(prefix):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for rule in getattr(module, "RULES", None) or [module.RULE]:
                if rule.code == code:
                    return rule
    return all_rules()[code]


def get_rule(code: str) -> Rule | None:
    try:
        return rule_of(code)
    except KeyError:
        return None
