"""The JSON report's serialiser writes what `json.dumps(indent=2, ensure_ascii=False)` writes,
byte for byte, on the values a report holds (and falls back to it where it cannot)."""

import json

import pytest

from commlint.report.json_format import dumps

CASES = [
    {"findings": [], "summary": {"by_code": {}}, "errors": []},
    {"a": [1, {"b": None, "c": True, "d": False}], "e": "ünïcödé — 漢字 😀"},
    {"ctl": '\x00\x1f\x7f\t\n\r"\\/', "sep": "\u2028\u2029", "bidi": "\u202e"},
    {"nested": [[[]], [{}], {"k": [[], {}]}], "big": 2**62, "neg": -7},
    {"lone surrogate": "\ud800"},  # the fast serialiser refuses it: json writes it
]


@pytest.mark.parametrize("value", CASES)
def test_same_bytes_as_json(value):
    assert dumps(value) == json.dumps(value, indent=2, ensure_ascii=False)
