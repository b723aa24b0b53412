"""The dry-run's verdict agrees with what really happens under gloo on CPU, program by program.

Every program in `programs/` runs twice: dry (simulated ranks, fake tensors, no real
communication) and for real (gloo processes with a short timeout). A program named `ok_*` must
really finish and be found clean; a program named `bad_*` must really hang or fail and be
found broken (an error finding, or a rank that raised, exited or timed out).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from realrun import RealRun, run_real, stop_fork_server

PROGRAMS = Path(__file__).parent / "programs"
FOUR_RANKS = {"ok_mesh_2d.py", "bad_mesh_branch.py", "ok_subgroups.py", "ok_anysource_monitored.py"}
ALL = sorted(PROGRAMS.glob("*.py"))
# The real runs come in CHUNKS batches, one xdist group each: four workers run them (and the
# dry-runs that follow) side by side, each batch once.
CHUNKS = 4


def chunk_of(path: Path) -> int:
    return ALL.index(path) % CHUNKS


def world_of(path: Path) -> int:
    return 4 if path.name in FOUR_RANKS else 2


def dry_verdict(path: Path) -> tuple[bool, str]:
    """(clean?, why) from the dry-run of the program."""
    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    w = world_of(path)
    options = DryRunOptions(
        program=str(path), args=[], world_size=w, nproc_per_node=w, ranks=list(range(w)),
        # generous for a loaded CI machine; the one program that spins forever needs less
        timeout=3.0 if "infinite" in path.name else 20.0, jobs=2,
    )  # fmt: skip
    result = dry_run(options)
    trace = result.trace(options)
    errors = [f for f in check_trace(trace, None).findings if f.severity == "error"]
    why = [f"{f.code} {f.message}" for f in errors]
    why += [f"rank {r} {e.kind}: {e.message}" for r, e in trace.ends.items()]
    return not why, "; ".join(why)


@pytest.fixture(scope="module", autouse=True)
def _fork_server_stopped():
    """The real runs' fork server (and any rank of it) ends with this module's tests."""
    yield
    stop_fork_server()


@cache
def real_runs(chunk: int) -> dict[str, RealRun]:
    programs = [p for p in ALL if chunk_of(p) == chunk]
    runs = run_real([(str(p), world_of(p)) for p in programs], timeout=4.0, parallel=2)
    # A loaded machine can stretch a correct program past the short timeout: re-run once, one
    # at a time and with a long one (a correct program ends as soon as it is done), each
    # program whose real run did not do what its name says.
    odd = [p for p in programs if runs[str(p)].ok != p.name.startswith("ok_")]
    if odd:
        runs.update(run_real([(str(p), world_of(p)) for p in odd], timeout=30.0, parallel=1))
    return runs


def test_corpus_is_balanced():
    ok = [p for p in ALL if p.name.startswith("ok_")]
    bad = [p for p in ALL if p.name.startswith("bad_")]
    assert len(ok) + len(bad) == len(ALL) >= 25
    assert abs(len(ok) - len(bad)) <= 2


@pytest.mark.real
@pytest.mark.parametrize(
    "program",
    [
        pytest.param(p, id=p.stem, marks=pytest.mark.xdist_group(f"agreement{chunk_of(p)}"))
        for p in ALL
    ],
)
def test_dry_run_agrees_with_gloo(program: Path):
    real = real_runs(chunk_of(program))[str(program)]
    expected_ok = program.name.startswith("ok_")
    assert real.ok == expected_ok, f"real run did not behave as the name says: {real.ranks}"
    clean, why = dry_verdict(program)
    assert clean == real.ok, (
        f"dry-run says {'clean' if clean else 'broken'} ({why}); gloo says {real.ranks}"
    )
