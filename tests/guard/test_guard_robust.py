"""The guard never breaks a correct job, explains stalls, and fingerprints group creation:
real gloo jobs (slow, marker `real`), torchrun and every rank forked from one warm interpreter
per test worker (tests/warm_python.py)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from warm_python import python_command

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
        cmd = [*python_command(), "-m", "commlint.guard", *guard, str(program)]
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


def _torchrun(
    program: Path, guard: list[str] | None, nproc: int = 2, args: list[str] | None = None
) -> subprocess.CompletedProcess:
    from bench.guard_jobs import command, job_env

    cmd = command(program, args or [], guard=guard, nproc=nproc, python=python_command())
    return subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=300)


def _finished(proc: subprocess.CompletedProcess) -> bool:
    """Every rank ran to its end: exit 0, or a SIGABRT after that (torch/gloo's shutdown race)."""
    return proc.returncode == 0 or "Signal 6 (SIGABRT)" in proc.stderr


def test_join_uneven_inputs_run_unchanged() -> None:
    """Under `Join`, a rank that ran out of batches shadows the others' bucket all-reduces with
    Join's own all-reduces (other ops, sizes, dtypes): the guard stands down inside the block,
    and the job ends exactly as unguarded."""
    plain = _torchrun(PROGRAMS / "join_uneven.py", None)
    guarded = _torchrun(PROGRAMS / "join_uneven.py", ["--timeout", "2"])
    assert _finished(plain), plain.stderr[-3000:]
    assert _finished(guarded), guarded.stderr[-3000:]
    assert "CL2" not in guarded.stderr and "degraded" not in guarded.stderr, guarded.stderr[-3000:]
    assert sorted(guarded.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    assert len(plain.stdout.splitlines()) == 2


def _created_at(stderr: str) -> float:
    """When the last rank reached its group creation (the program prints it)."""
    stamps = [
        float(line.rsplit(" ", 1)[1]) for line in stderr.splitlines() if " creating at " in line
    ]
    assert stamps, stderr[-2000:]
    return max(stamps)


@pytest.mark.parametrize("run", range(3))
def test_group_created_by_some_ranks_only_is_cl212_at_the_creating_line(run: int) -> None:
    """`if rank in eval_ranks: new_group(eval_ranks)` then `new_group()` on every rank: the
    ranks' k-th creations differ, which is CL212 at the creating line on every run, within 4×
    the guard timeout of the last rank reaching it (unguarded: a hang until the timeout)."""
    import time

    from bench.guard_jobs import command, job_env

    cmd = command(
        PROGRAMS / "group_setup.py", ["lazy"], guard=["--timeout", "2"], python=python_command()
    )
    proc = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=300)
    ended = time.time()
    err = proc.stderr
    assert proc.returncode != 0
    assert "CL212 group-name-mismatch" in err, err[-3000:]
    assert "rank 0: new_group(ranks=[0]) @" in err and "group_setup.py:22" in err, err[-3000:]
    assert "rank 1: new_group(ranks=[0, 1]) @" in err and "group_setup.py:23" in err
    assert ended - _created_at(err) < 4 * 2.0, ended - _created_at(err)


def test_stall_names_the_running_ranks_line_and_lets_it_finish(tmp_path: Path) -> None:
    """Rank 1 sleeps 9 s outside communication while rank 0 waits in all_reduce (guard timeout
    2 s): no hang is proven, so nothing is killed, but the guard reports every rank's state —
    rank 1 running at the sleeping line — and again at a growing interval; the job ends as
    unguarded and its trace is saved at the clean exit."""
    from bench.guard_jobs import command, job_env

    cmd = command(
        PROGRAMS / "stall.py",
        ["9"],
        guard=["--timeout", "2", "--save-trace", str(tmp_path)],
        python=python_command(),
    )
    proc = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=300)
    err = proc.stderr
    assert _finished(proc), err[-3000:]
    results = sorted(line for line in proc.stdout.splitlines() if line.strip())
    assert results == [f"rank {r} result [4.0, 4.0, 4.0]" for r in (0, 1)], proc.stdout
    reports = [line for line in err.splitlines() if "commlint guard: stall:" in line]
    assert len(reports) >= 2, err[-3000:]  # repeated, not once
    first = re.search(r"\(([\d.]+) s since the first call blocked\)", reports[0])
    assert first and float(first.group(1)) < 2 * 2.0, reports[0]  # within 2× the timeout
    assert "rank 0: blocked" in err and "all_reduce(WORLD) @" in err and "stall.py:18" in err
    assert "rank 1: running at " in err and "stall.py:17 in <module>" in err, err[-3000:]
    assert "next report in 2 s" in err and "next report in 4 s" in err, err[-3000:]
    assert (tmp_path / "commlint-guard-trace.yaml").is_file()


def test_kill_stalled_ends_the_job_with_one_summary_and_a_saved_trace(tmp_path: Path) -> None:
    """`--kill-stalled`: the same stall ends the job (exit 1 on every rank) with the states as
    the coordinator's last lines, and the trace is written before the ranks leave."""
    from bench.guard_jobs import command, job_env

    guard = ["--timeout", "2", "--kill-stalled", "--save-trace", str(tmp_path)]
    cmd = command(PROGRAMS / "stall.py", ["60"], guard=guard, python=python_command())
    proc = subprocess.run(cmd, env=job_env(), capture_output=True, text=True, timeout=300)
    err = proc.stderr
    assert proc.returncode != 0
    assert "the job is ended (--kill-stalled)" in err, err[-3000:]
    assert "stall.py:17 in <module>" in err
    assert (tmp_path / "commlint-guard-trace.yaml").is_file(), err[-3000:]


def test_device_mesh_shapes_that_differ_are_cl212_and_equal_creations_run() -> None:
    """`init_device_mesh` is a group creation too (its inner `new_group`s are not counted
    again): a 2-D mesh on rank 0 against a 1-D one on rank 1 stops at that line; a program
    that builds a mesh, subgroups and a group alike on every rank runs to its end."""
    from bench.guard_jobs import command, job_env

    bad = subprocess.run(
        command(
            PROGRAMS / "group_setup.py", ["mesh"], guard=["--timeout", "2"], python=python_command()
        ),
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0
    assert "CL212 group-name-mismatch" in bad.stderr, bad.stderr[-3000:]
    assert 'init_device_mesh(device_type="cpu", mesh_shape=[1, 2]) @' in bad.stderr
    assert "group_setup.py:29" in bad.stderr
    good = _torchrun(PROGRAMS / "group_setup.py", ["--timeout", "2"], args=["same"])
    assert _finished(good), good.stderr[-3000:]
    assert "CL2" not in good.stderr and "degraded" not in good.stderr, good.stderr[-3000:]
    assert sorted(x for x in good.stdout.splitlines() if x) == [
        "rank 0 result [8.0, 8.0]",
        "rank 1 result [8.0, 8.0]",
    ]


def test_fsdp2_collectives_are_recorded_and_a_skipped_step_is_cl203_at_the_users_lines() -> None:
    """torch 2.13's FSDP2 gathers and reduce-scatters with `dist.all_gather_single` /
    `reduce_scatter_single`. Rank 1 skips its last step's forward and goes to the loss
    all_reduce: rank 0's all-gather of the first layer meets it — CL203 naming both user
    lines (before these were wrapped: no finding, stall reports until gloo's 30 s timeout).
    Every rank running every step ends as unguarded."""
    from bench.guard_jobs import command, job_env

    bad = subprocess.run(
        command(
            PROGRAMS / "fsdp2_skip.py", ["skip"], guard=["--timeout", "2"], python=python_command()
        ),
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0
    assert "CL203 collective-mismatch" in bad.stderr, bad.stderr[-3000:]
    assert re.search(
        r"rank 0: all_gather\(WORLD\).*all_gather_single.*fsdp2_skip\.py:31", bad.stderr
    )
    assert re.search(r"rank 1: all_reduce\(WORLD\).*fsdp2_skip\.py:36", bad.stderr)
    plain = _torchrun(PROGRAMS / "fsdp2_skip.py", None, args=["same"])
    good = _torchrun(PROGRAMS / "fsdp2_skip.py", ["--timeout", "2"], args=["same"])
    assert _finished(plain) and _finished(good), good.stderr[-3000:]
    assert "CL2" not in good.stderr and "degraded" not in good.stderr, good.stderr[-3000:]
    assert sorted(good.stdout.splitlines()) == sorted(plain.stdout.splitlines())
    assert len(plain.stdout.splitlines()) == 2
