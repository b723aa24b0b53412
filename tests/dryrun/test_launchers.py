"""Launchers (issue 33 item 1): the same dry-run on a Ray cluster of three nodes, and in Slurm
tasks through submitit's local executor, gives the verdict of the local launcher — with the
values ranks deliver to each other and the files a barrier hands over travelling between
nodes through Ray (each node has its own scratch), and between Slurm tasks by rounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from cli_server import run_commlint

from commlint.plans.dryrun.slurm_launcher import parse_options, shares

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parent / "programs"
# rank 0 hands a file over at a barrier and broadcasts a step count every rank follows
OK = PROGRAMS / "ok_plan_file_first.py"
BAD = PROGRAMS / "bad_plan_extra_step.py"  # ... and the last rank takes one step more
WORLD, PER_NODE = 8, 4


def options(program: Path, launcher: str = "local"):
    from commlint.plans.dryrun.driver import DryRunOptions

    return DryRunOptions(
        program=str(program), args=[], world_size=WORLD, nproc_per_node=PER_NODE,
        ranks=list(range(WORLD)), timeout=30.0, jobs=0, launcher=launcher,
    )  # fmt: skip


def verdict(result, opts) -> dict:
    """What a user is told: every rank's calls (op, group, line), its end, and the findings
    (code, line, ranks)."""
    from commlint.graph.align import explain
    from commlint.graph.check import check_trace
    from commlint.plans.dryrun.merge import locate_at_site

    trace = result.trace(opts)
    findings = check_trace(trace, None, opts.program).findings
    for f in findings:
        locate_at_site(f, trace)
    explain(findings, trace)  # the user's line, as `commlint run` reports it
    return {
        "calls": {r: [(a.op, a.group, a.site) for a in trace.ranks[r]] for r in trace.ranks},
        "ends": {r: (e.kind, e.message) for r, e in trace.ends.items()},
        "incomplete": [(i.rank, i.why) for i in result.incomplete()],
        "findings": sorted(
            (f.code, f"{Path(f.path or '').name}:{f.line}", sorted({a.rank for a in f.actions}))
            for f in findings
        ),
    }


@cache
def local(program: Path) -> dict:
    from commlint.plans.dryrun.driver import dry_run

    opts = options(program)
    return verdict(dry_run(opts), opts)


def line_of(program: Path, text: str) -> int:
    return next(i for i, ln in enumerate(program.read_text().splitlines(), 1) if text in ln)


def test_local_verdicts_are_what_the_programs_say():
    ok, bad = local(OK), local(BAD)
    assert ok["findings"] == [] and not ok["incomplete"]
    # every rank followed the step count rank 0 broadcast, over the sizes from its file
    assert all(len(calls) == 8 for calls in ok["calls"].values())
    site = f"{BAD.name}:{line_of(BAD, 'the last rank' + chr(39) + 's fourth call')}"
    assert [(c, s, r[-1]) for c, s, r in bad["findings"]] == [("CL203", site, WORLD - 1)]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for _ in range(2):
        nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, log_to_driver=False, logging_level="error")
    nodes.wait_for_nodes()
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.mark.parametrize("program", [OK, BAD], ids=lambda p: p.stem)
def test_a_ray_cluster_of_three_nodes_gives_the_local_verdict(cluster, program: Path):
    from commlint.plans.dryrun.driver import dry_run

    opts = options(program, "ray")
    result = dry_run(opts)
    # the ranks were spread over the three nodes, each with a scratch of its own: the file
    # rank 0 wrote reached the other nodes' ranks only as a value through Ray
    assert len(result.usage) == 3
    assert all(u.ranks >= 2 for u in result.usage), result.usage
    assert sum(u.ranks for u in result.usage) == WORLD * result.passes
    assert verdict(result, opts) == local(program)


def test_the_ray_launcher_keeps_its_agents_between_runs(cluster):
    from commlint.plans.dryrun import ray_launcher

    assert len(ray_launcher._AGENTS) == 3  # warmed once per node, reused by the next run


def test_an_unreachable_ray_address_is_one_line_exit_2():
    pytest.importorskip("ray")
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "commlint", "run", "--launcher", "ray", str(OK)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "commlint: error: --launcher ray: cannot connect to RAY_ADDRESS=127.0.0.1:1: "
        "Connection refused (is the cluster's head node up?)"
    ]


@pytest.mark.parametrize(("launcher", "package"), [("ray", "ray"), ("slurm", "submitit")])
def test_a_launcher_not_installed_is_one_line_exit_2(monkeypatch, capsys, launcher, package):
    import importlib.util

    from commlint.cli import main

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == package else find_spec(name, *a),
    )
    assert main(["run", "--launcher", launcher, str(OK)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    extra = "ray" if launcher == "ray" else "slurm"
    assert err == [
        f"commlint: error: --launcher {launcher} needs {package}, which is not installed: "
        f"pip install 'commlint[{extra}]'"
    ]


def test_slurm_shares_and_options():
    assert shares(list(range(10)), 3) == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert shares([0, 1], 4) == [[0], [1]]
    assert parse_options(["cluster=local", "timeout_min=30", "slurm_partition=cpu"]) == (
        "local",
        {"timeout_min": 30, "slurm_partition": "cpu"},
    )
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        parse_options(["timeout_min"])


def test_slurm_tasks_through_submitit_give_the_local_verdict(tmp_path):
    """Two tasks of four ranks: the step count rank 0 broadcasts and the file it hands over
    reach the other task's ranks one round later."""
    pytest.importorskip("submitit")
    from commlint.plans.dryrun.slurm_launcher import record

    opts = options(OK)
    result = record(opts, 2, ["cluster=local"], str(tmp_path / "submitit"), 2)
    assert len(result.usage) == 2 and {u.ranks for u in result.usage} >= {PER_NODE}
    # three rounds: the other task's ranks get rank 0's file and count, then the sums of
    # their all-reduces reach the first task's ranks
    assert any("2 Slurm tasks (local) in 3 rounds" in n for n in result.notes), result.notes
    assert verdict(result, opts) == local(OK)
    assert not (tmp_path / "submitit").exists()


def test_commlint_run_launcher_slurm_gives_one_verdict(tmp_path):
    pytest.importorskip("submitit")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = run_commlint(
        ["run", "--launcher", "slurm",
         "--slurm-option", "cluster=local", "--slurm-folder", str(tmp_path / "s"),
         "--nnodes", "2", "--nproc-per-node", str(PER_NODE), "-j", "2",
         "--format", "json", str(BAD)],
        timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    findings = json.loads(out.stdout)["findings"]
    line = line_of(BAD, "the last rank's fourth call")
    assert [(f["code"], f["line"]) for f in findings if f["severity"] == "error"] == [
        ("CL203", line)
    ]
    assert "slurm node task 1" in out.stderr
