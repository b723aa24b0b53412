"""Render a rule's docs page; docs/rules/*.md are made by `python -m commlint.rules.docs`."""

from __future__ import annotations

import sys
from pathlib import Path

from commlint.rules import Rule, all_rules


def render(rule: Rule) -> str:
    lang = "yaml" if rule.kind == "trace" else "python"
    out = [
        f"# {rule.code} {rule.name}",
        "",
        f"**{rule.summary}**",
        "",
        f"Severity: `{rule.severity}` · kind: {rule.kind} rule"
        + (" (checked on traces and plans)" if rule.kind == "trace" else " (checked on source)"),
        "",
        "## What it means",
        "",
        rule.explanation.strip(),
        "",
    ]
    if rule.fix:
        out += ["## How to fix", "", rule.fix.strip(), ""]
    for title, examples in (("Failing example", rule.invalid), ("Fixed example", rule.valid)):
        for k, ex in enumerate(examples, 1):
            suffix = f" {k}" if len(examples) > 1 else ""
            out += [f"## {title}{suffix}", "", f"```{lang}", ex.strip("\n"), "```", ""]
    if rule.kind == "source":
        out += [
            "## Suppression",
            "",
            f"`# noqa: {rule.code}` on the line of the call (or the first line of its statement).",
            "",
        ]
    return "\n".join(out)


def write_all(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rule in all_rules().values():
        path = folder / f"{rule.code}.md"
        path.write_text(render(rule), encoding="utf-8")
        written.append(path)
    index = ["# Rules", "", "| code | name | severity | summary |", "|---|---|---|---|"]
    for rule in all_rules().values():
        index.append(
            f"| [{rule.code}]({rule.code}.md) | {rule.name} | {rule.severity} | {rule.summary} |"
        )
    (folder / "README.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules")
    for p in write_all(target):
        print(p)
