"""commlint as it was at an earlier commit, as a peer in the same benchmark run.

`tree(rev)` extracts the `commlint/` package of `rev` (`git archive`, nothing checked out, the
working tree untouched) into a temporary folder, byte-compiles it as an installed package is,
and yields the folder to put first on a child's `PYTHONPATH`. Benchmarks use it to print
"before" and "after" figures of the same input in one run, so load on a shared machine hits
both alike.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def describe(rev: str) -> str:
    """`rev` as `abc1234 (subject)` for a benchmark's header."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    short, _, subject = out.partition(" ")
    return f"{short} ({subject[:60]}{'…' if len(subject) > 60 else ''})"


@contextlib.contextmanager
def tree(rev: str) -> Iterator[Path]:
    """A folder holding `commlint/` as of `rev`, removed on exit."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "commlint"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix=f"commlint_{rev[:12]}_") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        subprocess.run([sys.executable, "-m", "compileall", "-q", tmp], check=True)
        yield Path(tmp)
