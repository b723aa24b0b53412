"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

One run; `tool.driver.rules` carries every rule's metadata (so `ruleIndex` is stable), each
result its primary location, the related ones (the rank-dependent condition, the other
actions of a deadlock) with ids and messages, and a partial fingerprint that survives lines
moving. Input errors become tool execution notifications.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import IO, Any

from commlint.findings import Finding, InputError, Report
from commlint.report.common import (
    PROJECT_URL,
    Span,
    anchor,
    artifact_uri,
    finding_anchor,
    fingerprint,
    json_text,
    posix_path,
    rule_url,
    secondary_locations,
)
from commlint.report.text import draw_cycle
from commlint.rules import Rule, all_rules

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "commlintFingerprint/v1"


def _text(text: str) -> dict[str, str]:
    """Hard-wrapped prose as SARIF text: paragraphs kept, lines within them joined."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return {"text": "\n\n".join(p for p in paragraphs if p)}


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    from commlint.rules.docs import render

    help_text = _text(rule.explanation)["text"]
    if rule.fix:
        help_text += "\n\nHow to fix: " + _text(rule.fix)["text"]
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": _text(rule.summary),
        "fullDescription": _text(rule.explanation),
        "help": {"text": help_text, "markdown": render(rule)},
        "helpUri": rule_url(rule.code),
        "defaultConfiguration": {"level": rule.severity},
        "properties": {"tags": ["commlint", f"{rule.kind}-rule"]},
    }


def _unknown_descriptor(finding: Finding) -> dict[str, Any]:
    # A finding whose code is not in the catalog (a front end's own code): still describe it.
    return {
        "id": finding.code,
        "name": finding.name or finding.code,
        "shortDescription": _text(finding.name or finding.code),
        "helpUri": rule_url(finding.code),
        "defaultConfiguration": {"level": finding.severity},
    }


def _region(span: Span) -> dict[str, int] | None:
    if span.line is None or span.line < 1:
        return None
    region: dict[str, int] = {"startLine": span.line}
    col = span.col if span.col is not None and span.col >= 1 else None
    if col is not None:
        region["startColumn"] = col
    end_line = span.end_line
    if end_line is not None and end_line >= span.line:
        region["endLine"] = end_line
        end_col = span.end_col
        ordered = end_col is not None and (end_line > span.line or end_col >= (col or 1))
        if col is not None and end_col is not None and end_col >= 1 and ordered:
            region["endColumn"] = end_col
    return region


def physical_location(span: Span) -> dict[str, Any]:
    uri, relative = artifact_uri(span.path)
    artifact: dict[str, Any] = {"uri": uri}
    if relative:
        artifact["uriBaseId"] = "%SRCROOT%"
    physical: dict[str, Any] = {"artifactLocation": artifact}
    region = _region(span)
    if region:
        physical["region"] = region
    return physical


def related_locations(finding: Finding) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for loc, label in secondary_locations(finding):
        span = anchor(loc)
        if span is None:
            continue
        out.append(
            {
                "id": len(out) + 1,
                "physicalLocation": physical_location(span),
                "message": {"text": label},
            }
        )
    return out


def primary_location(finding: Finding) -> dict[str, Any] | None:
    """Where the result points: the finding's line; for a finding on a whole input (a Flight
    Recorder dump folder) or a trace built in code, the source line of the first action it
    names (see `common.finding_anchor`). GitHub code scanning rejects a whole SARIF file if one
    result has no location, so only a finding that names no file at all has none."""
    span = finding_anchor(finding)
    return physical_location(span) if span else None


def _message(finding: Finding) -> str:
    text = finding.message
    if finding.cycle:
        text += "\nCycle: " + draw_cycle(finding.cycle)
    if finding.fix:
        text += "\nFix: " + finding.fix
    return text


def result(finding: Finding, rule_index: int, occurrence: int) -> dict[str, Any]:
    res: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": "error" if finding.severity == "error" else "warning",
        "message": {"text": _message(finding)},
        "locations": [],
        "partialFingerprints": {FINGERPRINT_KEY: f"{fingerprint(finding)}:{occurrence}"},
    }
    anchor = primary_location(finding)
    if anchor:
        res["locations"].append({"physicalLocation": anchor})
    related = related_locations(finding)
    if related:
        res["relatedLocations"] = related
    properties: dict[str, Any] = {}
    if finding.ranks:
        properties["ranks"] = finding.ranks
    if finding.models:
        properties["models"] = finding.models
    if finding.cycle:
        properties["cycle"] = [edge.model_dump(mode="json") for edge in finding.cycle]
    if finding.path and finding.line is None:
        properties["input"] = posix_path(finding.path)  # e.g. the Flight Recorder dump folder
    if properties:
        res["properties"] = properties
    return res


def notification(error: InputError) -> dict[str, Any]:
    note: dict[str, Any] = {"level": "error", "message": {"text": error.message}}
    if error.path:
        note["locations"] = [
            {"physicalLocation": physical_location(Span(error.path, error.line, error.col))}
        ]
    return note


def as_dict(report: Report) -> dict[str, Any]:
    from commlint._version import __version__

    rules = [rule_descriptor(rule) for rule in all_rules().values()]
    index = {descriptor["id"]: k for k, descriptor in enumerate(rules)}
    seen: Counter[str] = Counter()
    results = []
    for finding in report.findings:
        if finding.code not in index:
            index[finding.code] = len(rules)
            rules.append(_unknown_descriptor(finding))
        key = fingerprint(finding)
        results.append(result(finding, index[finding.code], seen[key]))
        seen[key] += 1
    invocation: dict[str, Any] = {"executionSuccessful": not report.errors}
    if report.errors:
        invocation["toolExecutionNotifications"] = [notification(e) for e in report.errors]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "commlint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": PROJECT_URL,
                        "rules": rules,
                    }
                },
                "invocations": [invocation],
                "originalUriBaseIds": {"%SRCROOT%": {"uri": _cwd_uri()}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def _cwd_uri() -> str:
    from pathlib import Path

    uri = Path.cwd().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def write(report: Report, stream: IO[str], options: dict[str, Any]) -> None:
    stream.write(json_text(json.dumps(as_dict(report), indent=2, ensure_ascii=False)))
    stream.write("\n")
