"""`commlint run` takes a pasted torchrun command line: its launcher options come from the
installed torch's own torchrun parser (commlint/commands/launcher.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_server import run_commlint
from torch.distributed.run import get_args_parser

from commlint.cli import build_parser, main
from commlint.commands.launcher import (
    ASSUMED_GPUS_PER_NODE,
    NEEDS_TORCH,
    Launch,
    LaunchError,
    resolve_launch,
)
from commlint.commands.run import _tee_ranks, register

ROOT = Path(__file__).resolve().parents[2]
BUGGY = (Path(__file__).parent / "programs" / "bad_conditional_collective.py").read_text()


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def launch(*argv: str) -> tuple[Launch, argparse.Namespace]:
    args = parse(*argv)
    return resolve_launch(args), args


def simulated(*argv: str) -> tuple[int, int, str, str | None, list[str]]:
    found, args = launch(*argv)
    return found.nproc_per_node, found.nnodes, found.program, found.module, args.args


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the buggy program as `pkg/mod.py` (and `pkg` runnable with -m)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    # the package's __init__ runs in the ranks, never while commlint looks the module up
    (pkg / "__init__.py").write_text("open('imported.txt', 'w').write('yes')\n")
    (pkg / "mod.py").write_text(
        BUGGY.replace(
            "rank = dist.get_rank()\n",
            "rank = dist.get_rank()\n"
            "import os\n"
            "print('sees', os.environ['MASTER_PORT'], os.environ['ROLE_NAME'])\n",
        )
    )
    (pkg / "__main__.py").write_text("print('main')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_pasted_torchrun_spellings_simulate_what_the_plain_form_does(project: Path):
    plain = simulated("--nproc-per-node", "2", "pkg/mod.py", "--lr", "1")
    pasted = [
        ("--nproc_per_node=2",),
        ("--nproc-per-node=2", "--nnodes", "1:1"),
        ("--standalone", "--nproc_per_node", "2"),
        ("--rdzv-backend", "c10d", "--rdzv_endpoint", "localhost:29400", "--rdzv-id", "7",
         "--rdzv_conf", "timeout=5", "--nproc-per-node", "2"),
        ("--master_addr", "10.1.1.1", "--master-port", "29501", "--node_rank", "0",
         "--nproc_per_node", "2"),
        ("--max-restarts", "3", "--monitor_interval", "1", "--log-dir", "logs", "-r", "3",
         "--redirects", "0:1", "--local-ranks-filter", "0", "--start_method", "fork",
         "--role", "trainer", "--run-path", "--nproc-per-node", "2"),
    ]  # fmt: skip
    for argv in pasted:
        assert simulated(*argv, "pkg/mod.py", "--lr", "1") == plain, argv
    # -m: the module's file, run as `python -m` runs it
    assert simulated("--nproc_per_node=2", "-m", "pkg.mod", "--lr", "1") == (
        2, 1, os.path.join("pkg", "mod.py"), "pkg.mod", ["--lr", "1"]
    )  # fmt: skip
    assert simulated("--nproc_per_node=2", "--module", "pkg")[2:4] == (
        os.path.join("pkg", "__main__.py"),
        "pkg",
    )
    assert not (project / "imported.txt").exists()
    # what follows the module is the program's, its own -m/--module included
    assert simulated("-m", "pkg.mod", "--module", "llama3")[3:] == (
        "pkg.mod",
        ["--module", "llama3"],
    )
    with pytest.raises(LaunchError, match=r"-m pkg\.nope: no module named 'pkg\.nope'"):
        launch("--nproc-per-node", "2", "-m", "pkg.nope")
    with pytest.raises(LaunchError, match=r"-m pkg\.mod\.x: no module named"):
        launch("-m", "pkg.mod.x")
    (project / "data").mkdir()
    (project / "data" / "__init__.py").write_text("")
    with pytest.raises(LaunchError, match="-m data: 'data' is a package with no __main__"):
        launch("-m", "data")


def test_what_a_single_machine_ignores_or_assumes_is_one_line(project: Path):
    found, _ = launch("--nproc-per-node", "4", "pkg/mod.py")
    assert found.note() is None  # nothing was assumed: no line
    found, _ = launch(
        "--standalone", "--rdzv-backend", "c10d", "--nnodes", "1:2", "--nproc-per-node", "auto",
        "--master_port", "29501", "--role", "trainer", "--max_restarts", "2", "pkg/mod.py",
    )  # fmt: skip
    assert (found.nnodes, found.nproc_per_node) == (2, ASSUMED_GPUS_PER_NODE)
    assert found.note() == (
        f"simulating 2 nodes × {ASSUMED_GPUS_PER_NODE} ranks on this machine; "
        "--nnodes 1:2: the most nodes the job can have (--nnodes N checks another); "
        f"--nproc-per-node auto: no GPU here, {ASSUMED_GPUS_PER_NODE} per node assumed "
        "(--nproc-per-node N for another count); ignored (a real launch's rendezvous, "
        "restarts, logging or placement): --standalone, --rdzv-backend"
    )
    # what torchrun hands its workers, the ranks see
    assert found.env == {
        "MASTER_PORT": "29501",
        "ROLE_NAME": "trainer",
        "TORCHELASTIC_MAX_RESTARTS": "2",
    }
    assert launch("--nproc-per-node", "gpu", "pkg/mod.py")[0].nproc_per_node == 8
    cpus = len(os.sched_getaffinity(0))
    found, _ = launch("--nproc-per-node", "cpu", "pkg/mod.py")
    assert found.nproc_per_node == cpus
    assert found.note().endswith(f"--nproc-per-node cpu: {cpus}, this machine's CPUs (as torchrun)")


def test_every_option_of_the_installed_torchrun_is_accepted():
    valid = {"nproc_per_node": "2", "nnodes": "1", "node_rank": "0", "tee": "0"}
    for action in get_args_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = valid.get(action.dest) or (
            str(action.choices[0])
            if action.choices
            else "1"
            if action.type in (int, float)
            else "x"
        )
        for spelling in action.option_strings:
            argv = [spelling] if action.nargs == 0 else [spelling, value]
            if action.dest == "no_python":
                continue  # accepted by the parser, refused below
            args = parse(*argv, "train.py")
            assert args.program == "train.py", argv


def test_commlints_own_options_win_and_are_never_shadowed():
    torchrun = {s for a in get_args_parser()._actions for s in a.option_strings}
    # the only option strings both define, each with commlint's meaning (docs/dryrun.md)
    sub = argparse.ArgumentParser().add_subparsers()
    register(sub)
    run_parser = sub.choices["run"]
    run_parser.parse_known_args(["train.py"])  # torchrun's options join on first use
    own = {s for a in run_parser._actions if not a.dest.startswith("torchrun_")
           for s in a.option_strings}  # fmt: skip
    assert own & torchrun == {
        "-h", "--help", "--nproc-per-node", "--nproc_per_node", "--nnodes",
        "--node-rank", "--node_rank", "-t", "--tee",
    }  # fmt: skip
    args = parse(
        "--timeout", "5", "--save-trace", "d", "--real-budget", "0", "--ranks", "0",
        "--format", "json", "--select", "CL2", "-j", "1", "--model", "nccl", "--steps", "2",
        "-m", "pkg.mod",
    )  # fmt: skip
    assert (args.timeout, args.save_trace, args.real_budget, args.ranks) == (5.0, "d", 0, "0")
    assert (args.format, args.select, args.jobs, args.model, args.steps) == (
        "json", "CL2", 1, "nccl", 2,
    )  # fmt: skip
    assert args.node_rank is None  # every node, as before (torchrun's default is 0)


def test_tee_keeps_its_ranks_and_reads_torchruns_local_rank_form():
    assert _tee_ranks("0", 4, 2) == {0}
    assert _tee_ranks("1-2", 4, 2) == {1, 2}
    assert _tee_ranks("0:3,1:0", 4, 2) == {0, 2}  # local rank 0 of both nodes
    with pytest.raises(ValueError, match="not torchrun's stream number"):
        _tee_ranks("3", 2, 2)


def exit_code(*argv: str) -> int:
    try:
        return main(["run", *argv])
    except SystemExit as exc:  # a usage error found by the parser
        return int(exc.code or 0)


def test_bad_launcher_lines_are_one_line_usage_errors(project: Path, capsys):
    for argv, reason in [
        (["--no-python", "--nproc-per-node", "2", "./a.out"], "only a Python program"),
        (["--no_python", "pkg/mod.py"], "only a Python program"),
        (["--nproc-per-node", "2", "--bogus", "pkg/mod.py"], "unrecognized arguments: --bogus"),
        (["--nnodes", "2:1", "pkg/mod.py"], "not a number of nodes or a range MIN:MAX"),
        (["--nproc-per-node", "two", "pkg/mod.py"], "not a number of ranks, auto, cpu, gpu"),
        (["--master-port", "p", "pkg/mod.py"], "invalid int value"),
        (["-m", "pkg.nope"], "no module named"),
    ]:
        assert exit_code(*argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and reason in err, (argv, err)


def test_without_torch_a_torchrun_flag_asks_for_torch(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(SystemExit) as caught:
        parse("--standalone", "train.py")
    assert caught.value.code == 2
    assert capsys.readouterr().err.strip() == f"commlint: error: {NEEDS_TORCH}"


def test_building_the_command_line_never_imports_torch():
    code = (
        "import sys\nfrom commlint.cli import build_parser\n"
        "build_parser().parse_args(['check', 'x.py'])\n"
        "build_parser().parse_args(['plan', 'x.yaml'])\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.stdout.strip() == "False", out.stderr


def test_a_pasted_torchrun_line_gets_the_plain_forms_verdict(project: Path):
    """Three real dry-runs of a rank-0-only all_reduce: plain, a pasted torchrun line with a
    script, and one with -m. Same exit code, same findings."""

    def dry_run(*argv: str) -> tuple[int, list[dict], str]:
        out = run_commlint(
            ["run", "--format", "json", *argv],
            timeout=300,
            cwd=project,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return out.returncode, json.loads(out.stdout)["findings"], out.stderr

    code, findings, err = dry_run("--nproc-per-node", "2", "pkg/mod.py")
    assert code == 1 and [(f["code"], f["path"], f["line"]) for f in findings] == [
        ("CL203", os.path.join("pkg", "mod.py"), 11)
    ], err
    assert "[rank 0]: sees 29500 default" in err  # torchrun's variables by default
    pasted = (
        "--standalone", "--nnodes", "1:1", "--rdzv-backend", "c10d", "--rdzv_endpoint",
        "localhost:0", "--rdzv-id", "job", "--master_addr", "127.0.0.1", "--master_port",
        "29501", "--role", "trainer", "--max_restarts", "0", "--nproc_per_node=2",
    )  # fmt: skip
    for tail in (("pkg/mod.py",), ("-m", "pkg.mod")):
        again, same, err = dry_run(*pasted, *tail)
        assert (again, same) == (code, findings), err
        assert "[rank 0]: sees 29501 trainer" in err
        assert (
            "commlint: note: simulating 1 node × 2 ranks on this machine; ignored (a real "
            "launch's rendezvous, restarts, logging or placement): --standalone, "
            "--rdzv-backend, --rdzv-endpoint\n"
        ) in err


def test_the_programs_own_options_are_the_programs():
    # an abbreviation of a commlint option (`--out` of --output-format/--output-file) or an
    # exact one (`--timeout`) after the program belongs to the program, as under torchrun
    ns = parse("--nproc-per-node", "2", "train.py", "--out", "X", "--save", "--timeout", "5")
    assert ns.program == "train.py"
    assert ns.args == ["--out", "X", "--save", "--timeout", "5"]
    assert ns.timeout == parse("--nproc-per-node", "2", "train.py").timeout
