"""Opt-in CPU accounting per test: `COMMLINT_TEST_CPU=<file> python -m pytest ...`.

Wall time is no measure on a shared machine; CPU seconds are. For every test this records
the CPU (user + system) of its pytest process and of the children it waited for (a child's
CPU only reaches RUSAGE_CHILDREN once it is reaped), over setup, call and teardown — so a
module-scoped fixture's cost lands on the first test that needs it. Each xdist worker
appends JSON lines to the file; the controller prints the top consumers at the end.
"""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "COMMLINT_TEST_CPU"
TOP = 40


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator:
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    own0, kids0 = _cpu()
    yield
    own1, kids1 = _cpu()
    row = {"test": item.nodeid, "self": round(own1 - own0, 3), "children": round(kids1 - kids0, 3)}
    row["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    path = os.environ.get(ENV)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not Path(path).exists():
        return
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["total"] = row["self"] + row["children"]
    rows.sort(key=lambda r: -r["total"])
    total = sum(r["total"] for r in rows)
    by_file: dict[str, float] = {}
    for row in rows:
        key = row["test"].split("::")[0]
        by_file[key] = by_file.get(key, 0.0) + row["total"]
    terminalreporter.section(f"CPU seconds per test ({ENV}={path})")
    terminalreporter.write_line(f"{len(rows)} tests, {total:.1f} CPU s in tests")
    for row in rows[:TOP]:
        terminalreporter.write_line(
            f"{row['total']:8.1f} s (self {row['self']:6.1f}, children {row['children']:6.1f})"
            f"  {row['test']}"
        )
    terminalreporter.write_line("per file:")
    for key, cpu in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{cpu:8.1f} s  {key}")
