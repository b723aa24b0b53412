"""The checker's gloo verdict agrees with what really happens when the replay runs.

Every corpus trace is replayed with gloo on CPU (cases batched per world size, a few launches
side by side; a case where the checker predicts a rank to fail — gloo may abort that process —
runs on its own), and
each rank's real fate (finished / timed out at action i / raised or died at action i) must be
the one the checker predicted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commlint.graph import check_trace
from commlint.plans.io import load_trace
from commlint.plans.replay import case_of, run_cases

pytest.importorskip("torch")

CORPUS = Path(__file__).resolve().parent / "corpus"
TIMEOUT = 6.0


def _predictions():
    cases, predicted = [], {}
    for path in sorted(CORPUS.glob("*.yaml")):
        trace = load_trace(path).trace
        outcomes = check_trace(trace, "gloo").outcomes["gloo"]
        cases.append(case_of(trace, path.stem))
        predicted[path.stem] = outcomes
    return cases, predicted


def _launches(cases: list[dict], fails: set[str], size: int = 5) -> list[list[dict]]:
    """The cases as launches: each one gloo may abort alone, the others `size` to a launch
    of one world size (a launch runs its cases one after another, each hang waits out the
    timeout; separate launches run side by side)."""
    launches = [[c] for c in cases if c["name"] in fails]
    for w in sorted({c["world_size"] for c in cases}):
        batch = [c for c in cases if c["world_size"] == w and c["name"] not in fails]
        launches += [batch[i : i + size] for i in range(0, len(batch), size)]
    return launches


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    from concurrent.futures import ThreadPoolExecutor

    cases, predicted = _predictions()
    fails = {n for n, o in predicted.items() if any(v.status == "failed" for v in o.values())}
    work = tmp_path_factory.mktemp("replay")
    results: dict = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        jobs = [
            pool.submit(run_cases, launch, work / f"launch{k}", TIMEOUT)
            for k, launch in enumerate(_launches(cases, fails))
        ]
        for job in jobs:
            results.update(job.result())
    # A loaded machine can stretch a correct op past the timeout: re-run each disagreeing case
    # once, alone, with a longer timeout. A real disagreement persists.
    by_name = {c["name"]: c for c in cases}
    for name in [n for n in predicted if _disagreements(n, predicted[n], results.get(n, {}))]:
        results.update(run_cases([by_name[name]], work / f"retry-{name}", TIMEOUT * 2))
    return predicted, results


def _disagreements(name: str, outcomes: dict, case: dict) -> list[str]:
    out = []
    for rank, pred in outcomes.items():
        real = case.get(rank)
        if real is None or not _agree(pred, real, case):
            out.append(f"{name} rank {rank}: checker {pred}, real {real}")
    return out


def _agree(pred, real, case: dict) -> bool:
    statuses = {r["status"] for r in case.values()}
    if pred.status == "finished":
        # the peer of a rank that gloo aborted may see the connection reset instead
        return real["status"] == "finished" or (
            "crashed" in statuses and real["status"] in ("error", "closed")
        )
    if real["action"] != pred.action:
        return False
    if pred.status == "blocked":
        # whichever rank times out first closes the pair: the other sees "Connection closed"
        return real["status"] == "timeout" or (real["status"] == "closed" and "timeout" in statuses)
    return real["status"] in ("error", "crashed")


@pytest.mark.real
@pytest.mark.timeout(900)
def test_replay_agrees_with_checker(real_runs):
    predicted, results = real_runs
    disagreements = []
    for name, outcomes in predicted.items():
        disagreements += _disagreements(name, outcomes, results.get(name, {}))
    assert not disagreements, "\n".join(disagreements)
    # The corpus really exercises all three fates.
    statuses = {r["status"] for case in results.values() for r in case.values()}
    assert {"finished", "timeout"} <= statuses and statuses & {"error", "crashed"}


SIZE_MISMATCH = """\
version: 1
world_size: 2
ranks:
  0: [{op: all_reduce, shape: [4]}]
  1: [{op: all_reduce, shape: [64]}]
"""


@pytest.mark.real
@pytest.mark.timeout(300)
def test_repro_script_exit_codes(tmp_path, capsys):
    """`commlint replay` writes a script that names itself, says what its exit codes mean, and
    exits 1 on the send/send deadlock, 0 on the correct pipeline and 3 when gloo fails."""
    import subprocess
    import sys

    from commlint.cli import main

    examples = Path(__file__).resolve().parents[1] / "examples"
    mismatch = tmp_path / "mismatch.yaml"
    mismatch.write_text(SIZE_MISMATCH, encoding="utf-8")
    cases = {
        "deadlock": (examples / "send_send_deadlock.yaml", 2, 1, {"timeout", "closed"}),
        "clean": (examples / "pipeline_parity_ok.yaml", 4, 0, {"finished"}),
        "mismatch": (mismatch, 2, 3, {"error", "crashed", "closed"}),
    }
    procs = {}
    for name, (trace, nproc, _, _) in cases.items():
        script = tmp_path / f"repro_{name}.py"
        assert main(["replay", str(trace), "-o", str(script), "--timeout", "3"]) == 0
        text = script.read_text(encoding="utf-8")
        assert "{this file}" not in text
        assert f"torchrun --nproc-per-node {nproc} repro_{name}.py" in text
        assert "closed" in text and "Exit code: 0" in text
        # the three scripts run side by side: each mostly waits (torch's import, a timeout)
        procs[name] = subprocess.Popen(
            [sys.executable, str(script), "--results", str(tmp_path / name)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    failures = []
    for name, (_, _, expected, statuses) in cases.items():
        stdout, _ = procs[name].communicate(timeout=240)
        seen = {
            line.split('"status": "')[1].split('"')[0]
            for line in stdout.splitlines()
            if line.startswith("COMMLINT-REPLAY ")
        }
        if procs[name].returncode != expected or not seen <= statuses:
            failures.append(
                f"{name}: exit {procs[name].returncode} (want {expected}), statuses {seen}"
            )
    assert not failures, "\n".join(failures)
