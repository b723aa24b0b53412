"""`commlint rules` lists the rule codes; `commlint rule CODE` explains one."""

from __future__ import annotations

import argparse
import json
import sys

from commlint.rules import all_rules, get_rule
from commlint.rules.docs import render


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help="list every rule code")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=list_rules)
    q = sub.add_parser("rule", help="explain one rule, with a failing and a fixed example")
    q.add_argument("code", help="rule code, e.g. CL201")
    q.set_defaults(func=explain)


def list_rules(args: argparse.Namespace) -> int:
    rules = all_rules().values()
    if args.format == "json":
        data = [
            {
                "code": r.code,
                "name": r.name,
                "severity": r.severity,
                "kind": r.kind,
                "summary": r.summary,
            }
            for r in rules
        ]
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for r in rules:
        print(f"{r.code}  {r.name:<28} {r.severity:<8} {r.summary}")
    return 0


def explain(args: argparse.Namespace) -> int:
    rule = get_rule(args.code)
    if rule is None:
        print(
            f"commlint: error: unknown rule code {args.code!r} (see `commlint rules`)",
            file=sys.stderr,
        )
        return 2
    print(render(rule))
    return 0
