"""The guard never breaks a correct job, explains stalls, and fingerprints group creation:
real gloo jobs (slow, marker `real`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.guard_jobs import ROOT

pytestmark = pytest.mark.real

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_style(program: Path, world: int, guard: list[str]) -> list[subprocess.Popen]:
    """Each rank its own process, started here with the variables srun's wrappers set; rank
    0's process hosts the TCPStore (env:// rendezvous)."""
    port = _free_port()
    procs = []
    for r in range(world):
        env = dict(
            os.environ,
            RANK=str(r),
            LOCAL_RANK=str(r),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        cmd = [sys.executable, "-m", "commlint.guard", *guard, str(program)]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    return procs


def test_store_host_leaving_first_degrades_instead_of_breaking_the_job() -> None:
    """Rank 0 hosts the store and exits right after the last collective; ranks 1 and 2 go on
    with send/recv. Unguarded every rank exits 0; the guard's store reads then fail — it says
    so in one line and steps aside, and every rank still exits 0 with its result."""
    procs = _slurm_style(PROGRAMS / "store_host_first.py", 3, ["--timeout", "2"])
    outs = [p.communicate(timeout=240) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, (r, err[-3000:])
        assert f"rank {r} result" in out, (r, out, err[-2000:])
        assert "Traceback" not in err, (r, err[-3000:])
    degraded = [line for _, err in outs for line in err.splitlines() if "guard degraded" in line]
    assert degraded and all(line.startswith("commlint guard degraded: ") for line in degraded), (
        degraded
    )
