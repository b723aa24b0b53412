"""`commlint run --device cuda|cpu`: the machine the job runs on, as the program sees it
(issue 30, item 4); exceptions no tensor caused need no real re-run (item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_server import run_commlint

from commlint.commands.run import resolve_target
from commlint.graph.check import check_trace

FIXTURES = Path(__file__).parent / "fixtures"
PROGRAM = FIXTURES / "device_target.py"


def record(device: str, *args: str):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(PROGRAM), args=list(args), world_size=2, nproc_per_node=2, ranks=[0, 1],
        timeout=60, jobs=2, device=device,
    )  # fmt: skip
    result = dry_run(options)
    return result, result.trace(options)


@pytest.mark.parametrize(
    ("explicit", "env", "device", "why"),
    [
        (None, {}, "cuda", "the default"),
        (None, {"ACCELERATE_USE_CPU": "1"}, "cpu", "ACCELERATE_USE_CPU=1"),
        (None, {"ACCELERATE_USE_CPU": "true"}, "cpu", "ACCELERATE_USE_CPU=true"),
        (None, {"ACCELERATE_USE_CPU": "0"}, "cuda", "the default"),
        ("cpu", {}, "cpu", "--device cpu"),
        # what was typed wins over a variable left in the shell
        ("cuda", {"ACCELERATE_USE_CPU": "1"}, "cuda", "--device cuda"),
    ],
)
def test_the_target_and_what_decided_it(explicit, env, device, why):
    got, words = resolve_target(explicit, env)
    assert got == device and words.startswith(device) and why in words


def test_gpus_by_default_no_real_compute_for_a_cpu0_device():
    result, trace = record("cuda")
    assert result.mode == "fake" and not result.notes, result.notes  # no real re-run
    assert [a.op for a in trace.ranks[1]] == ["all_reduce", "barrier", "all_reduce"]
    assert trace.meta["device"] == "cuda" and not trace.ends
    assert check_trace(trace, None).findings == []


def test_a_cpu_target_takes_the_programs_cpu_path():
    result, trace = record("cpu")
    assert result.mode == "fake" and not result.notes, result.notes
    assert [a.op for a in trace.ranks[1]] == ["barrier", "all_reduce"]
    assert [a.op for a in trace.ranks[0]] == ["all_reduce", "barrier", "all_reduce"]
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL203"]
    line = next(i for i, t in enumerate(PROGRAM.read_text().splitlines(), 1) if "expect:" in t)
    assert findings[0].actions[0].site.endswith(f"device_target.py:{line}")


def test_a_gpu_asked_for_on_a_cpu_target_fails_as_there_with_no_real_rerun():
    result, trace = record("cpu", "--cuda-anyway")
    assert result.mode == "fake" and not result.notes, result.notes
    ends = {r: trace.ends[r] for r in (0, 1)}
    assert all(e.kind == "exception" and "CUDA" in e.message for e in ends.values()), ends
    assert all(e.site.endswith("device_target.py:12") for e in ends.values())


def test_the_verdict_line_names_the_target_from_the_environment(tmp_path):
    env = {**__import__("os").environ, "ACCELERATE_USE_CPU": "1"}
    proc = run_commlint(
        ["run", "--nproc-per-node", "2", str(PROGRAM)], timeout=600, env=env, cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("Found 1 finding") and "target: cpu (ACCELERATE_USE_CPU=1" in last
    assert "recorded again" not in proc.stderr
