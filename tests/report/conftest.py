"""Fixtures: a tiny project as the working directory and hand-made findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_samples import (
    HELPERS,
    TRAIN,
    conditional_finding,
    cycle_finding,
    make_report,
    pathonly_finding,
)

from commlint.findings import Finding, InputError, Report


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny project as the working directory: train.py and helpers.py."""
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def conditional() -> Finding:
    return conditional_finding()


@pytest.fixture
def cycle() -> Finding:
    return cycle_finding()


@pytest.fixture
def pathonly() -> Finding:
    return pathonly_finding()


@pytest.fixture
def every_shape(project: Path) -> Report:
    """One report with every shape of finding and an input error, in a project directory."""
    outside = Finding(
        code="CL199",
        name="",
        severity="warning",
        message="A code the catalog does not know.",
        path=str(project.parent / "elsewhere.py"),
        line=3,
    )
    return make_report(
        conditional_finding(),
        cycle_finding(),
        pathonly_finding(),
        outside,
        errors=[InputError(path="broken.py", line=4, col=2, message="invalid syntax")],
    )
