"""`commlint run` says what it did not see (issue 30, item 9): calls that communicate in the
user's files the ranks ran but never reached, with the static findings on those lines; a run
that recorded no communication at all is not a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cli_server import run_commlint

FIXTURES = Path(__file__).parent / "fixtures" / "coverage"


def run(program: Path, cwd: Path) -> subprocess.CompletedProcess:
    return run_commlint(["run", "--nproc-per-node", "2", str(program)], timeout=300, cwd=cwd)


def marked(path: Path) -> list[int]:
    lines = path.read_text().splitlines()
    return [i for i, text in enumerate(lines, 1) if "# not reached" in text]


def test_unreached_communication_is_named_after_the_verdict_with_its_static_findings():
    out = run(FIXTURES / "train.py", FIXTURES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All checks passed" in out.stdout
    notes = [
        ln.removeprefix("commlint: note: not reached by this run: ")
        for ln in out.stderr.splitlines()
        if ln.startswith("commlint: note: not reached by this run: ")
    ]
    evaluate_call, barrier = marked(FIXTURES / "train.py")
    (helper,) = marked(FIXTURES / "helpers.py")
    assert notes == [
        f"helpers.py:{helper} all_reduce (in `evaluate`, called at train.py:{evaluate_call} "
        "under `if epoch % 10 == 9:`)",
        f"train.py:{barrier} barrier (under `if dist.get_rank() == 0:` at line {barrier - 1})",
    ]  # the multi-line all_reduce every epoch makes is not among them
    assert f"train.py:{barrier}:13: CL101 [error] conditional-collective" in out.stderr


def test_a_run_that_recorded_no_communication_is_an_error(tmp_path: Path):
    program = tmp_path / "quiet.py"
    program.write_text(
        "import torch.distributed as dist\n"
        'dist.init_process_group("gloo")\n'
        "if dist.get_world_size() > 8:\n"
        "    dist.barrier()\n"
    )
    out = run(program, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"commlint: error: {program}: no rank communicated: not one collective or "
        "point-to-point call was recorded, so nothing was checked" in out.stderr
    )
    assert "All checks passed" not in out.stdout
    assert "not reached by this run: quiet.py:4 barrier" in out.stderr
