from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS
