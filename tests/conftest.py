from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill processes a failed real-run test left behind: multiprocessing joins its
    non-daemon children at exit, so one wedged rank would otherwise hang the whole run."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)
