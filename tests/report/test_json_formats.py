"""sarif (validated against the official 2.1.0 schema) and rdjson, plus the CLI wiring."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from report_samples import TRAIN, conditional_finding, make_report, render

from commlint.cli import main
from commlint.rules import all_rules

SARIF_SCHEMA = Path("/work/shared/data/sarif-schema-2.1.0.json")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft7Validator(schema)


def assert_valid_sarif(validator, log: dict) -> None:
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def test_sarif_validates_and_carries_rule_metadata(sarif_validator, every_shape):
    log = json.loads(render(every_shape, "sarif"))
    assert_valid_sarif(sarif_validator, log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert ids[: len(all_rules())] == list(all_rules())
    for descriptor in rules[: len(all_rules())]:
        rule = all_rules()[descriptor["id"]]
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.summary
        assert descriptor["fullDescription"]["text"]
        assert descriptor["helpUri"].endswith(f"/docs/rules/{rule.code}.md")
        assert descriptor["defaultConfiguration"]["level"] == rule.severity
    # a code outside the catalog is still described, so that its ruleIndex is valid
    assert "CL199" in ids
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert run["invocations"][0]["executionSuccessful"] is False
    note = run["invocations"][0]["toolExecutionNotifications"][0]
    assert note["message"]["text"] == "invalid syntax"


def test_sarif_locations(sarif_validator, every_shape):
    results = json.loads(render(every_shape, "sarif"))["runs"][0]["results"]
    source, trace, pathonly, outside = results
    physical = source["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == {"startLine": 8, "startColumn": 9, "endLine": 8, "endColumn": 30}
    assert source["level"] == "error"
    related = source["relatedLocations"]
    assert [r["id"] for r in related] == [1, 2]
    assert related[0]["message"]["text"] == "depends on rank"
    assert related[0]["physicalLocation"]["region"]["startLine"] == 6
    assert related[1]["physicalLocation"]["artifactLocation"]["uri"] == "helpers.py"
    assert "Fix: Move the all_reduce" in source["message"]["text"]
    # a trace finding without a file points at the first call site of its cycle (GitHub
    # rejects a SARIF file with one unlocated result)
    trace_physical = trace["locations"][0]["physicalLocation"]
    assert trace_physical["artifactLocation"]["uri"] == "train.py"
    # only the line is known (a call site): the columns are those of the code on that line
    assert trace_physical["region"] == {
        "startLine": 8,
        "startColumn": 9,
        "endLine": 8,
        "endColumn": 30,
    }
    assert trace["properties"]["ranks"] == [0, 1]
    assert "rank 0 ─send(→1) @train.py:8─▶ rank 1" in trace["message"]["text"]
    # a file without a line; characters that need percent-encoding in a URI
    assert pathonly["level"] == "warning"
    pathonly_physical = pathonly["locations"][0]["physicalLocation"]
    assert pathonly_physical["artifactLocation"]["uri"] == "plans/odd%2C%20name%3A1.yaml"
    assert "region" not in pathonly_physical
    # a file outside the working directory: an absolute file URI, no base id
    artifact = outside["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact["uri"].startswith("file:///") and "uriBaseId" not in artifact


def test_sarif_fingerprints_survive_moved_lines_and_separate_twins(project):
    first = json.loads(render(make_report(conditional_finding()), "sarif"))
    before = first["runs"][0]["results"][0]["partialFingerprints"]
    # three blank lines above: the finding moves to line 11, its fingerprint does not change
    (project / "train.py").write_text("\n\n\n" + TRAIN, encoding="utf-8")
    moved = conditional_finding()
    moved.line = moved.end_line = 11
    after = json.loads(render(make_report(moved), "sarif"))["runs"][0]["results"][0]
    assert after["partialFingerprints"] == before
    twins = json.loads(render(make_report(moved, moved), "sarif"))["runs"][0]["results"]
    prints = [r["partialFingerprints"]["commlintFingerprint/v1"] for r in twins]
    assert prints[0] != prints[1]


def test_sarif_finding_with_nothing_to_point_at_is_still_valid(sarif_validator, cycle):
    cycle.actions = []
    cycle.cycle = None
    log = json.loads(render(make_report(cycle), "sarif"))
    assert_valid_sarif(sarif_validator, log)
    assert log["runs"][0]["results"][0]["locations"] == []


def test_sarif_of_a_clean_run_is_valid(sarif_validator):
    log = json.loads(render(make_report(), "sarif"))
    assert_valid_sarif(sarif_validator, log)
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True


# The Reviewdog Diagnostic Format (proto/rdf/reviewdog.proto), as a JSON schema of our own.
_POSITION = {
    "type": "object",
    "properties": {"line": {"type": "integer", "minimum": 1}, "column": {"type": "integer"}},
    "required": ["line"],
    "additionalProperties": False,
}
_LOCATION = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "range": {
            "type": "object",
            "properties": {"start": _POSITION, "end": _POSITION},
            "required": ["start"],
            "additionalProperties": False,
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}
_SOURCE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "url": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}
RDJSON_SCHEMA = {
    "type": "object",
    "properties": {
        "source": _SOURCE,
        "severity": {"enum": ["UNKNOWN_SEVERITY", "ERROR", "WARNING", "INFO"]},
        "diagnostics": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "location": _LOCATION,
                    "severity": {"enum": ["ERROR", "WARNING", "INFO"]},
                    "source": _SOURCE,
                    "code": {
                        "type": "object",
                        "properties": {"value": {"type": "string"}, "url": {"type": "string"}},
                        "required": ["value"],
                        "additionalProperties": False,
                    },
                    "suggestions": {"type": "array"},
                    "original_output": {"type": "string"},
                    "related_locations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"message": {"type": "string"}, "location": _LOCATION},
                            "required": ["location"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["message", "severity", "code"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["diagnostics"],
    "additionalProperties": False,
}


def test_rdjson(every_shape):
    result = json.loads(render(every_shape, "rdjson"))
    jsonschema.validate(result, RDJSON_SCHEMA)
    source, trace, pathonly, outside = result["diagnostics"]
    assert source["severity"] == "ERROR"
    assert source["code"] == {
        "value": "CL101",
        "url": source["code"]["url"],
    } and source["code"]["url"].endswith("/docs/rules/CL101.md")
    assert source["location"] == {
        "path": "train.py",
        "range": {"start": {"line": 8, "column": 9}, "end": {"line": 8, "column": 30}},
    }
    assert source["related_locations"][0] == {
        "message": "depends on rank",
        "location": {
            "path": "train.py",
            "range": {"start": {"line": 6, "column": 8}, "end": {"line": 6, "column": 17}},
        },
    }
    assert "suggestions" not in source
    # a trace finding points at the call site of its first action, as sarif and github do
    assert trace["location"] == {
        "path": "train.py",
        "range": {"start": {"line": 8, "column": 9}, "end": {"line": 8, "column": 30}},
    }
    assert pathonly["severity"] == "WARNING"
    assert pathonly["location"] == {"path": "plans/odd, name:1.yaml"}
    assert outside["location"]["path"].startswith("/")


@pytest.mark.parametrize("fmt", ["concise", "full", "github", "sarif", "rdjson", "text", "json"])
def test_every_format_works_for_plan(fmt, capsys, monkeypatch, sarif_validator):
    monkeypatch.chdir(EXAMPLES.parent)
    code = main(["plan", "examples", "--format", fmt])
    out = capsys.readouterr().out
    assert code == 1
    assert "send_send_deadlock.yaml" in out
    if fmt == "sarif":
        log = json.loads(out)
        assert_valid_sarif(sarif_validator, log)
        (result,) = log["runs"][0]["results"]
        assert result["ruleId"] == "CL201"
        # the other rank's blocked send is a related location in the plan file
        assert result["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 9
    if fmt == "rdjson":
        jsonschema.validate(json.loads(out), RDJSON_SCHEMA)


CONDITIONAL = """\
import torch.distributed as dist


def save(model, step):
    if dist.get_rank() == 0:
        dist.barrier()
        print("saved", step)
"""


@pytest.mark.parametrize("fmt", ["sarif", "rdjson", "github", "concise", "full"])
def test_check_findings_in_every_format(fmt, tmp_path, monkeypatch, capsys, sarif_validator):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "save.py").write_text(CONDITIONAL, encoding="utf-8")
    code = main(["check", "save.py", "--no-cache", "--select", "CL101", "--format", fmt])
    out = capsys.readouterr().out
    assert code == 1
    if fmt == "sarif":
        log = json.loads(out)
        assert_valid_sarif(sarif_validator, log)
        (result,) = log["runs"][0]["results"]
        region = result["locations"][0]["physicalLocation"]["region"]
        assert (region["startLine"], region["startColumn"]) == (6, 9)
        assert region["endColumn"] == 9 + len("dist.barrier()")
        condition = result["relatedLocations"][0]
        assert condition["physicalLocation"]["region"]["startLine"] == 5
        assert "rank" in condition["message"]["text"]
    elif fmt == "rdjson":
        (diag,) = json.loads(out)["diagnostics"]
        jsonschema.validate(json.loads(out), RDJSON_SCHEMA)
        assert diag["location"]["range"]["start"] == {"line": 6, "column": 9}
        assert diag["related_locations"][0]["location"]["range"]["start"]["line"] == 5
    elif fmt == "github":
        assert out.startswith("::error file=save.py,line=6,col=9,endLine=6,endColumn=23,title=")
    elif fmt == "concise":
        assert out.splitlines()[0].startswith("save.py:6:9: CL101 ")
    else:
        lines = out.splitlines()
        assert lines[lines.index("6 |         dist.barrier()") + 1].startswith("  |         ^^^^^")
        condition = lines.index("5 |     if dist.get_rank() == 0:")
        assert lines[condition + 1].startswith("  |        ---")
