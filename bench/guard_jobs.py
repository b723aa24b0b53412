"""The torchrun command lines of the guard's benchmarks and real tests, in one place.

`command(script, args, guard=[...])` is `python -m torch.distributed.run --standalone
--nproc-per-node N [flags] [-m commlint.guard GUARD...] script ARGS...`; `guard=None` runs
the script unguarded. `python`, when given, is the interpreter command (a list) that starts
torchrun and each of its workers instead of `sys.executable` (the tests' warm interpreter:
tests/warm_python.py); the workers then run `PYTHON -u [-m commlint.guard GUARD...] script`
through torchrun's `--no-python`, as torchrun runs `sys.executable -u ...` itself.
`job_env()` is the environment these jobs run in: one OpenMP thread per rank (two ranks
share two cores) and this checkout first on `PYTHONPATH`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def command(
    script: str | Path,
    args: Sequence[str] = (),
    *,
    guard: Sequence[str] | None = None,
    nproc: int = 2,
    flags: Sequence[str] = (),
    python: Sequence[str] | None = None,
) -> list[str]:
    """torchrun of `script ARGS`, under `-m commlint.guard GUARD...` unless `guard` is None."""
    under = ["-m", "commlint.guard", *guard] if guard is not None else []
    worker = ["--no-python", *python, "-u"] if python else []
    return [
        *(python or [sys.executable]),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        *flags,
        *worker,
        *under,
        str(script),
        *args,
    ]


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
