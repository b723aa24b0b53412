"""The torchrun command lines of the guard's benchmarks and real tests, in one place.

`command(script, args, guard=[...])` is `python -m torch.distributed.run --standalone
--nproc-per-node N [flags] [-m commlint.guard GUARD...] script ARGS...`; `guard=None` runs
the script unguarded. `job_env()` is the environment these jobs run in: one OpenMP thread per
rank (two ranks share two cores) and this checkout first on `PYTHONPATH`.
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
) -> list[str]:
    """torchrun of `script ARGS`, under `-m commlint.guard GUARD...` unless `guard` is None."""
    under = ["-m", "commlint.guard", *guard] if guard is not None else []
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        *flags,
        *under,
        str(script),
        *args,
    ]


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
