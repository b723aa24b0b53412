"""The hand-written trace corpus: each file states the findings the checker must report."""

from __future__ import annotations

from pathlib import Path

import pytest

from commlint.graph import check_trace
from commlint.plans.io import load_trace

CORPUS = Path(__file__).resolve().parent / "corpus"
FILES = sorted(CORPUS.glob("*.yaml"))


def test_corpus_is_large_enough():
    assert len(FILES) >= 30
    clean = [f for f in FILES if not load_trace(f).trace.meta["expect"]]
    assert 10 <= len(clean) <= len(FILES) - 10, "both correct and broken traces"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_corpus_verdict(path):
    loaded = load_trace(path)
    result = check_trace(loaded.trace, "gloo", str(path), loaded.lines)
    assert sorted({f.code for f in result.findings}) == sorted(loaded.trace.meta["expect"])
    for f in result.findings:
        assert f.path == str(path) and f.line is not None, "findings point into the plan file"
        assert f.message and f.fix


def test_async_reorder_is_model_sensitive():
    trace = load_trace(CORPUS / "async_groups_reordered.yaml").trace
    result = check_trace(trace, "all")
    (finding,) = result.findings
    assert finding.code == "CL201"
    assert finding.models == ["single-queue"]
    assert result.blocked("gloo") == [] and result.blocked("single-queue") == [0, 1]
