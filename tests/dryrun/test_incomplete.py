"""A dry-run never passes what it did not see, keeps its plumbing to itself, and delivers the
values a real backend would (issue 11 points 2, 3, 6; issue 13's dry-run bullet; issue 15's
dry-run output)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from functools import cache
from pathlib import Path

import pytest
import yaml
from cli_server import run_commlint

from commlint.graph.check import check_trace

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"


@cache
def record(program: str, world: int = 2, timeout: float = 20.0, max_passes: int = 12):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=program,
        args=[],
        world_size=world,
        nproc_per_node=world,
        ranks=list(range(world)),
        timeout=timeout,
        jobs=2,
        max_passes=max_passes,
    )
    result = dry_run(options)
    return result, result.trace(options)


def past_budget(program: Path, timeout: float = 20.0):
    """(result, trace) of a 2-rank dry-run with nothing computed for real (`--real-budget 0`):
    tests of uncomputed numbers are decisions."""
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(program), args=[], world_size=2, nproc_per_node=2, ranks=[0, 1],
        timeout=timeout, jobs=2, real_budget=0,
    )  # fmt: skip
    result = dry_run(options)
    return result, result.trace(options)


def line_of(program: Path, text: str) -> int:
    return next(i for i, ln in enumerate(program.read_text().splitlines(), 1) if text in ln)


def cli(*args: str, command: str = "run") -> subprocess.CompletedProcess:
    return run_commlint([command, *args], timeout=300)


def errors(out: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in out.stderr.splitlines() if ln.startswith("commlint: error:")]


def test_a_rank_killed_by_a_signal_is_incomplete_at_its_crash_line(tmp_path: Path):
    program = PROGRAMS / "bad_crash_signal.py"
    rel = os.path.relpath(program)
    out = cli("--nproc-per-node", "2", "--save-trace", str(tmp_path), rel)
    assert out.returncode == 2, out.stderr
    crash = line_of(program, "string_at(0)")
    assert errors(out) == [
        f"commlint: error: {rel}:{crash}: rank 1 did not reach the end of {rel}: killed by "
        "SIGSEGV (the process crashed or was killed); the verdict covers only what the ranks "
        "did before"
    ]
    assert "CL210" in out.stdout and "All checks passed" not in out.stdout
    # What was recorded is saved, and says that rank 1 was not seen to its end.
    saved = yaml.safe_load((tmp_path / "rank-00001.yaml").read_text())
    assert saved["meta"]["incomplete"]["1"]["site"] == f"{rel}:{crash}"
    # Checked later from the saved parts: the same finding, the same error, never a pass.
    out = cli(str(tmp_path), command="plan")
    assert out.returncode == 2 and "CL210" in out.stdout
    assert [e.split(": rank 1 did not reach")[0] for e in errors(out)] == [
        f"commlint: error: {rel}:{crash}"
    ]


def test_a_run_stopped_at_the_time_limit_never_passes(tmp_path: Path):
    # Every rank spins the same way: no peer waits for another, so the checker alone finds
    # nothing — the stop itself must keep the verdict from reading as clean.
    program = tmp_path / "spin.py"
    program.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "x = 0\n"
        "while True:\n"
        "    x += 1\n"
    )
    out = cli("--nproc-per-node", "2", "--timeout", "2", "--format", "json", str(program))
    assert out.returncode == 2, out.stderr
    assert json.loads(out.stdout)["findings"] == []
    stops = errors(out)
    assert len(stops) == 2
    assert all("still computing after 2 s of CPU time (--timeout)" in e for e in stops)
    assert stops[0].startswith(f"commlint: error: {program}:") and "rank 0 did not" in stops[0]


def test_a_hang_before_a_crash_is_reported_as_the_hang(tmp_path: Path):
    program = tmp_path / "hang_then_raise.py"
    program.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        "    dist.barrier()\n"
        "raise ValueError('bad config')\n"
    )
    out = cli("--nproc-per-node", "2", "--save-trace", str(tmp_path / "t"), str(program))
    assert out.returncode == 1, out.stderr
    assert f"{program}:4: CL210" in out.stdout
    assert errors(out) == []
    assert "every rank raised ValueError: bad config" in out.stderr  # as a note, after it
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "rank-00000.yaml",
        "rank-00001.yaml",
    ]


def test_every_rank_leaving_with_a_failing_exit_code_is_an_error(tmp_path: Path):
    """argparse's `sys.exit(2)` on every rank (a missing argument) is a failed run, as
    torchrun reports it: never "All checks passed"."""
    program = tmp_path / "needs_args.py"
    program.write_text(
        "import argparse\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument('--steps', type=int, required=True)\n"
        "parser.parse_args()\n"
        "dist.barrier()\n"
    )
    out = cli("--nproc-per-node", "2", str(program))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"commlint: error: {program}:6: every rank ended with sys.exit(2)" in out.stderr
    assert "All checks passed" not in out.stdout


def test_an_early_sys_exit_zero_is_located():
    program = PROGRAMS / "bad_sys_exit_zero.py"
    _, trace = record(str(program))
    assert trace.ends[1].kind == "exit" and trace.ends[1].message == "sys.exit(0)"
    assert trace.ends[1].site.endswith(f":{line_of(program, '    sys.exit(0)')}")
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL210"]


def test_processes_a_rank_starts_die_with_it(tmp_path: Path):
    marker = uuid.uuid4().hex
    program = tmp_path / "helper.py"
    program.write_text(
        "import subprocess, sys\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        f"sleeper = [sys.executable, '-c', 'import time; time.sleep(300)', '{marker}']\n"
        "subprocess.Popen(sleeper)\n"
        "subprocess.Popen(sleeper, process_group=0)  # a process group of its own\n"
        "subprocess.Popen(sleeper, start_new_session=True)  # a session of its own\n"
        "dist.barrier()\n"
    )
    out = cli("--nproc-per-node", "2", str(program))
    assert out.returncode == 0, out.stderr
    assert "rank 0 left 3 processes it started running; they were killed with it" in out.stderr
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            alive.append(pid)
    assert alive == []


def test_deep_copies_never_touch_the_ranks_plumbing():
    program = PROGRAMS / "bad_deepcopy_then_rank0_barrier.py"
    result, trace = record(str(program))
    assert not result.incomplete() and not trace.ends
    assert result.mode == "fake" and not result.notes
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL202"]
    assert findings[0].actions[0].site.endswith(f":{line_of(program, 'dist.barrier()')}")


def test_every_reduce_op_delivers_what_a_backend_delivers():
    # The program asserts on each reduced value, then agrees on a step count with
    # all_reduce(MIN) of its own batch count (3 on rank 0, 4 on rank 1).
    program = PROGRAMS / "ok_reduce_ops.py"
    result, trace = record(str(program))
    assert not trace.ends and result.converged, trace.ends
    steps = [a for a in trace.ranks[1] if a.op == "all_reduce" and a.shape == [16]]
    assert len(steps) == 3
    ops = [a.reduce_op for a in trace.ranks[0] if a.op == "all_reduce"][:8]
    assert ops == ["sum", "product", "min", "max", "bor", "band", "bxor", "min"]
    assert check_trace(trace, None).findings == []


def test_a_barrier_orders_file_writes_between_ranks():
    program = PROGRAMS / "ok_main_process_first.py"
    result, trace = record(str(program))
    assert not trace.ends and result.converged, trace.ends
    assert [a.shape for a in trace.ranks[1] if a.op == "all_reduce"] == [[4]]
    assert check_trace(trace, None).findings == []
    assert not (PROGRAMS / ".cache-main-first.txt").exists()  # rank 0 removed it


def test_files_a_rank_writes_stay_its_own_and_out_of_your_tree(tmp_path: Path):
    """4 ranks, 2 at a time: rank 0 saves a checkpoint at its end (a file, and a file in a
    folder it makes), and every rank resumes from one if it finds it at its start. In a real
    run no rank finds it (all start together); ranks 2 and 3, recorded after rank 0 ended,
    must not find it either (they would skip steps: a false CL2xx). No file the program
    writes lands in its folder."""
    program = tmp_path / "resume.py"
    program.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "start = torch.load('ckpt.pt')['step'] if os.path.exists('ckpt.pt') else 0\n"
        "runs = os.listdir('ckpts') if os.path.isdir('ckpts') else []\n"
        "start += len(runs)\n"
        "for step in range(start, 3):\n"
        "    dist.all_reduce(torch.ones(4))\n"
        "if dist.get_rank() == 0:\n"
        "    torch.save({'step': 3}, 'ckpt.pt')\n"
        "    os.makedirs('ckpts/run1', exist_ok=True)\n"
        "    torch.save({'step': 3}, 'ckpts/run1/model.pt')\n"
        "    assert os.listdir('ckpts') == ['run1'] and os.path.isdir('ckpts/run1')\n"
        "    with open('log.txt', 'w') as fh:\n"
        "        fh.write('done')\n"
        "    assert open('log.txt').read() == 'done' and os.path.exists('ckpt.pt')\n"
        "    os.remove('ckpt.pt')\n"
        "    assert not os.path.exists('ckpt.pt')\n"
    )
    (tmp_path / "kept.txt").write_text("mine")
    cmd = ["run", "--nproc-per-node", "4", "-j", "2"]
    out = run_commlint([*cmd, str(program)], timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # the folder rank 0 made was on disk while it ran (C code may write into it): gone now
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["kept.txt", "resume.py"]


def test_the_scripts_output_is_shown_per_rank_like_torchrun_tee(tmp_path: Path):
    program = tmp_path / "talk.py"
    program.write_text(
        "import sys\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "print(f'hello from {dist.get_rank()}')\n"
        "print('warned', file=sys.stderr)\n"
        "dist.barrier()  # a run that communicates nothing is an error (test_coverage.py)\n"
    )
    out = cli("--nproc-per-node", "2", str(program))
    assert out.returncode == 0, out.stderr
    shown = [ln for ln in out.stderr.splitlines() if ln.startswith("[rank")]
    assert shown == ["[rank 0]: hello from 0", "[rank 0]: warned"]
    out = cli("--nproc-per-node", "2", "--tee", "1", "--format", "json", str(program))
    assert "[rank 1]: hello from 1" in out.stderr and "[rank 0]" not in out.stderr
    assert json.loads(out.stdout)["findings"] == []


def test_split_runs_with_different_tensor_modes_are_refused(tmp_path: Path):
    program = str(PROGRAMS / "ok_allreduce.py")
    for ranks, mode in (("0-1", "fake"), ("2-3", "real")):
        out = cli(
            "--nproc-per-node", "4", "--ranks", ranks, "--tensors", mode,
            "--save-trace", str(tmp_path), program,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    out = cli(str(tmp_path), command="plan")
    assert out.returncode == 2
    assert errors(out) == [
        f"commlint: error: {tmp_path}: the parts of this dry-run were recorded with different "
        f"tensor modes: fake ({tmp_path / 'rank-00000.yaml'}), real "
        f"({tmp_path / 'rank-00002.yaml'}); record every part again with the same --tensors "
        "(--tensors real when one part needed real values)"
    ]


def test_a_printed_loss_item_costs_no_real_compute():
    program = PROGRAMS / "ok_ddp_print_loss.py"
    result, trace = record(str(program))
    assert result.mode == "fake" and not result.notes and not trace.ends
    buckets = [a for a in trace.ranks[1] if a.label == "DDP gradient bucket"]
    assert len(buckets) >= 3
    assert result.runs[0].output.splitlines() == [f"step {s} loss 1.0000" for s in range(3)]
    site = f"{os.path.relpath(program)}:{line_of(program, 'loss {loss.item()')}"
    assert f"the value read at {site} was not computed" in trace.meta["assumes"]
    assert check_trace(trace, None).findings == []


def test_float_and_int_of_fake_tensors_that_never_steer_cost_no_real_compute():
    """float()/int() give plain numbers, so the dry-run reads the program's bytecode: used
    only in arithmetic, formatting, logging, local containers, fake tensors' operations
    and the value the script prints, they get a placeholder and the run stays fake."""
    program = PROGRAMS / "ok_float_metrics.py"
    result, trace = record(str(program))
    assert result.mode == "fake" and not result.notes and not trace.ends
    out = result.runs[0].output.splitlines()
    assert out[:3] == [f"step {s} loss 1.0000 norm 1.00" for s in range(3)]
    rel = os.path.relpath(program)
    for text in ("history.append(float(loss))", "p.data.mul_(", 'metrics["tokens"]'):
        site = f"{rel}:{line_of(program, text)}"
        assert f"the value read at {site} was not computed" in trace.meta["assumes"]
    assert check_trace(trace, None).findings == []


def test_a_float_tested_at_once_is_a_decision_over_the_budget(tmp_path: Path):
    """`if float(probe) > 0.5:` of a rank-local value, past the budget: the test is a
    decision (CL211 at it, both outcomes' calls named), no real compute."""
    program = tmp_path / "float_decides.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "gen = torch.Generator().manual_seed(500 + dist.get_rank())\n"
        "weight = torch.nn.Linear(8, 8).weight.data\n"
        "if float(weight.sum() * torch.rand(1, generator=gen)) > 0.5:\n"
        "    dist.all_reduce(weight)\n"
        "dist.barrier()\n"
    )
    out = cli("--nproc-per-node", "2", "--real-budget", "0", str(program))
    assert out.returncode == 1, out.stderr
    assert f"{program}:6:1: CL211" in out.stdout
    assert f"when the test at {program}:6 is True, rank 0 calls all_reduce" in out.stdout
    assert "recorded again with small real CPU tensors" not in out.stderr


def test_shapes_seeds_and_attention_of_gpu_programs_stay_on_fake_tensors(tmp_path: Path):
    """Three things GPU programs do that used to force real tensors: a pipeline's shape
    header received into a small buffer (`torch.zeros(2)` then `recv`), a seed read from a
    view of the RNG state and broadcast (torchtitan's `set_determinism`), FlexAttention
    with a backward pass (higher-order operators run their fake rules)."""
    program = tmp_path / "gpu_program.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.nn.attention.flex_attention import flex_attention\n"
        "dist.init_process_group('nccl')\n"
        "rank = dist.get_rank()\n"
        "device = torch.device('cuda', rank)\n"
        "seed_tensor = torch.get_rng_state()[:8].to(device)\n"
        "dist.broadcast(seed_tensor, src=0)\n"
        "seed = seed_tensor.to('cpu').view(torch.uint64).item()\n"
        "assert isinstance(seed, int)\n"
        "if rank == 0:\n"
        "    act = torch.randn(4, 8, device=device)\n"
        "    shape = [float(n) for n in act.shape]\n"
        "    dist.send(torch.tensor(shape, device=device), 1)\n"
        "    dist.send(act, 1)\n"
        "else:\n"
        "    header = torch.zeros(2, device=device)\n"
        "    dist.recv(header, 0)\n"
        "    act = torch.empty(int(header[0]), int(header[1]), device=device)\n"
        "    dist.recv(act, 0)\n"
        "q = torch.randn(1, 2, 16, 8, device=device, requires_grad=True)\n"
        "flex_attention(q, q, q).sum().backward()\n"
        "dist.all_reduce(q.grad)\n"
    )
    result, trace = record(str(program))
    assert result.mode == "fake" and not result.notes and not trace.ends, result.notes
    recv = [a for a in trace.ranks[1] if a.op == "recv"]
    assert [a.shape for a in recv] == [[2], [4, 8]]  # the header's values made the shape
    assert [a.op for a in trace.ranks[0]][-1] == "all_reduce"
    assert check_trace(trace, None).findings == []


@pytest.mark.parametrize(
    ("read", "line"),
    [
        # an unread number stops at the test that it steers
        ("value = loss.item() * 2  # arithmetic is free", 7),
        # a plain float() number is given only where it never steers: stops at the read
        ("value = float(loss)", 6),
    ],
)
def test_a_read_value_that_steers_falls_back_to_real_tensors_at_that_line(
    read: str, line: int, tmp_path: Path
):
    program = tmp_path / "steer.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "w = torch.nn.Parameter(torch.randn(128))  # too big to be drawn for real\n"
        "loss = (w * 2).sum()\n"
        f"{read}\n"
        "if value > 1e9:  # steers: needs the real value\n"
        "    dist.barrier()\n"
        "dist.all_reduce(torch.ones(2))\n"
    )
    result, trace = record(str(program))
    assert result.mode == "real"
    assert f"stopped under fake tensors at {program}:{line}" in result.notes[0]
    assert [a.op for a in trace.ranks[0]] == ["all_reduce"]
    assert check_trace(trace, None).findings == []


# seeded per rank: each rank's loss is its own (unseeded, every rank's would be the same)
_BIG_STEER = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "dist.init_process_group('gloo'); torch.manual_seed(dist.get_rank())\n"
    "layer = torch.nn.Linear({width}, {width})  # {width}^2 fp32 weights\n"
    "loss = layer(torch.randn(2, {width})).sum()\n"
    "{test}\n"
    "    dist.barrier()\n"
    "dist.all_reduce(torch.ones(2))\n"
)


def test_a_tested_value_of_a_model_over_the_budget_is_explored_not_computed(tmp_path: Path):
    """A 1 GiB layer (16,384²·4 bytes, never allocated) whose loss each rank tests: a real
    re-run would cost that much per rank, so the test is decided alike on every rank and its
    other outcome explored — the barrier under it is CL211, found without real compute."""
    program = tmp_path / "big_steer.py"
    program.write_text(_BIG_STEER.format(width=16384, test="if loss.item() > 100.0:"))
    out = cli("--nproc-per-node", "2", "--format", "json", str(program))
    assert out.returncode == 1, out.stderr
    findings = json.loads(out.stdout)["findings"]
    assert [(f["code"], f["line"], f["ranks"]) for f in findings] == [("CL211", 6, [0])]
    assert f"a rank-local value read at {program}:6 decides" in findings[0]["message"]
    assert {r["line"] for r in findings[0]["related"]} == {6, 7, 8}
    assert "at least 1 GiB per rank, over the real re-run budget of 1 GiB" in out.stderr


def test_a_number_used_as_a_count_over_the_budget_stops_the_ranks_there(tmp_path: Path):
    """`int()` of a value fake tensors did not compute (a loop bound) has no outcome to
    explore: over the budget the ranks are reported as stopped at that line (exit 2)."""
    program = tmp_path / "big_count.py"
    program.write_text(_BIG_STEER.format(width=16384, test="for _ in range(int(loss.item())):"))
    out = cli("--nproc-per-node", "2", str(program))
    assert out.returncode == 2, out.stderr
    lines = errors(out)
    for rank in (0, 1):
        line = next(ln for ln in lines if f"rank {rank} did not reach the end" in ln)
        assert line.startswith(f"commlint: error: {program}:6: "), line
        assert "a value of a fake tensor" in line
        assert "at least 1 GiB per rank, over the real re-run budget of 1 GiB" in line
        assert "--tensors real" in line
    assert "every rank raised" not in out.stderr  # the dry-run stopped them, not the program
    assert "All checks passed" not in out.stdout + out.stderr


def test_the_real_rerun_budget_is_the_users_to_set(tmp_path: Path):
    """`--real-budget 0` never re-runs with real tensors, even for a tiny model (the test is
    explored: CL211); a budget above the model's size lets it fall back to real values, under
    which no rank's loss passes 100 and the program is clean."""
    program = tmp_path / "small_steer.py"
    program.write_text(_BIG_STEER.format(width=8, test="if loss.item() > 100.0:"))
    never = cli("--nproc-per-node", "2", "--real-budget", "0", str(program))
    assert never.returncode == 1, never.stderr
    assert "over the real re-run budget of 0 bytes" in never.stderr
    assert f"{program}:6:1: CL211" in never.stdout
    allowed = cli("--nproc-per-node", "2", "--real-budget", "64M", str(program))
    assert allowed.returncode == 0, allowed.stderr
    assert f"stopped under fake tensors at {program}:6" in allowed.stderr
    bad = cli("--nproc-per-node", "2", "--real-budget", "lots", str(program))
    assert bad.returncode == 2 and "not a size like 512M" in bad.stderr


def test_rank_local_and_agreed_values_are_told_apart(tmp_path: Path):
    """The agreement pair (both also run for real under gloo by test_agreement: the first
    hangs, the second finishes), here with nothing computed for real: the loss each rank
    tests is CL211 at the test, naming both outcomes' calls; the all-reduced loss is the same
    on every rank, taken alike, clean. The saved trace gives `commlint plan` the same verdict."""

    verdicts = {}
    for name in ("bad_local_loss_steers.py", "ok_reduced_loss_steers.py"):
        program = PROGRAMS / name
        result, trace = past_budget(program)
        assert result.mode == "fake" and not result.incomplete()
        verdicts[name] = (program, trace, check_trace(trace, None).findings)
    program, trace, findings = verdicts["bad_local_loss_steers.py"]
    test = line_of(program, "if loss.item() > 1.0")
    assert [(f.code, f.line, f.ranks) for f in findings] == [("CL211", test, [0])]
    assert {r.line for r in findings[0].related} == {test, test + 1, test + 2}
    assert "all_reduce" in findings[0].message and "barrier" in findings[0].message
    program, trace, findings = verdicts["ok_reduced_loss_steers.py"]
    assert findings == [] and "steering" not in trace.meta
    assert "the same on every rank (a collective's result)" in trace.meta["assumes"]
    saved = tmp_path / "saved"
    out = cli(
        "--nproc-per-node", "2", "--real-budget", "0", "--save-trace", str(saved),
        str(PROGRAMS / "bad_local_loss_steers.py"),
    )  # fmt: skip
    assert out.returncode == 1
    plan = cli(str(saved), command="plan")
    assert plan.returncode == 1 and f"bad_local_loss_steers.py:{test}:1: CL211" in plan.stdout


@pytest.mark.parametrize(
    ("name", "findings"),
    [
        ("ok_seeded_alike_steers.py", []),
        ("ok_printed_on_rank0_steers.py", []),
        ("bad_sampled_data_steers.py", ["CL211"]),
    ],
)
def test_a_number_every_rank_makes_alike_is_not_rank_local(name: str, findings: list[str]):
    """Past the budget (nothing computed), a tested number is rank-local unless every rank
    made it alike: the same seed, the same data, the same operations (model initialisation
    and an optimizer step included) give the same number everywhere, as a real run would —
    no false CL211; a number one rank only prints (never tests) changes nothing. The same
    seed with each rank's own rows is still rank-local. (Each runs for real under gloo in
    test_agreement: the ok ones finish, the bad one hangs.)"""

    program = PROGRAMS / name
    result, trace = past_budget(program)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    found = check_trace(trace, None).findings
    assert [f.code for f in found] == findings
    test = line_of(program, ".item() >")
    alike = f"tested at {os.path.relpath(program)}:{test} is made alike on every rank"
    assert any(alike in n for n in result.notes) == (not findings), result.notes
    if findings:
        assert found[0].line == test


def test_a_tensor_made_from_an_uncomputed_number_knows_no_value():
    """`torch.tensor([loss.item()])` held the placeholder (1.0) as a value the dry-run knew:
    a test of it was taken alike on both ranks, a false all-clear; past the budget, DeepSpeed's
    `torch.tensor([float(norm)])` stopped the rank at `float()`. The tensor now holds no
    value, rank-local unless a collective over every rank made it the same. (Both run for
    real under gloo in test_agreement: the bad one hangs, the ok one finishes.)"""

    bad = PROGRAMS / "bad_item_into_tensor_steers.py"
    result, trace = past_budget(bad)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    found = check_trace(trace, None).findings
    test = line_of(bad, "if logged.item() > 0")
    assert [(f.code, f.line) for f in found] == [("CL211", test)]
    assert "barrier" in found[0].message
    ok = PROGRAMS / "ok_weight_norm_reduced_steers.py"
    result, trace = past_budget(ok)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    assert check_trace(trace, None).findings == []
    # the global norm is the same on every rank: one outcome (the placeholder's) for all
    assert [a.op for a in trace.ranks[0]] == [a.op for a in trace.ranks[1]]
    assert "the same on every rank (a collective's result)" in trace.meta["assumes"]


# Numbers that differ between ranks in a real run (each program hangs under torchrun: rank 0
# and rank 1 fall on different sides of the test; unseeded, in about half the launches) but
# whose making could look alike: a rank-local threshold, a placeholder turned into a plain
# number, a generator one rank drew from once more, a tensor given another storage or view,
# an optimizer resumed from the rank's own state, an unseeded init, batch norm statistics,
# a loop's second test, a generator given positionally, a default dtype set per rank, a
# DTensor's optimizer step (from two adversarial reviews).
_MADE_DIFFERENTLY = {
    "threshold": (
        "torch.manual_seed(0)\n"
        "loss = torch.randn(128, 64).abs().mean() * 10  # ~7.98 on every rank\n"
        "threshold = 5.0 + 5.0 * rank\n"
        "if float(loss) > threshold:"
    ),
    "plain_number": (
        "import math\n"
        "base = torch.full((128, 64), float(rank))\n"
        "s = math.sqrt(base.sum().item())  # 0 or 90.5\n"
        "if torch.full((128, 64), s).mean().item() > 1.0:"
    ),
    "generator": (
        "torch.manual_seed(0)\n"
        "buf = torch.zeros(128, 64)\n"
        "if rank == 0:\n"
        "    dist.send(torch.full((128, 64), 0.5), 1)\n"
        "else:\n"
        "    dist.recv(buf, 0)\n"
        "    torch.bernoulli(buf)  # rank 1 draws 8,192 numbers more\n"
        "if torch.randn(128, 64).sum().item() > -62.0:  # rank 0: -67.3, rank 1: -56.8"
    ),
    "storage": (
        "w = torch.zeros(128, 64)\n"
        "m = w * 2\n"
        "w.data = torch.full((128, 64), float(rank))\n"
        "if w.mean().item() > 0.5:"
    ),
    "optimizer_state": (
        "model = torch.nn.Linear(128, 64)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)\n"
        "sd = opt.state_dict()\n"
        "sd['state'] = {0: {'momentum_buffer': torch.full((64, 128), float(rank))},\n"
        "               1: {'momentum_buffer': torch.zeros(64)}}\n"
        "opt.load_state_dict(sd)\n"
        "model(torch.ones(4, 128)).sum().backward()\n"
        "opt.step()\n"
        "if model.weight.sum().item() > -3600.0:  # rank 0: -3272, rank 1: -4006"
    ),
    # torch seeds its default generator from the OS in every process torchrun starts
    "unseeded": (
        "model = torch.nn.Linear(64, 128)\nif model(torch.ones(256, 64)).sum().item() > 0.0:"
    ),
    "batch_norm_statistics": (
        "bn = torch.nn.BatchNorm1d(128)\n"
        "bn(torch.full((256, 128), float(rank)))  # updates running_mean, schema silent\n"
        "if bn.running_mean.sum().item() > 6.0:"
    ),
    "loop": (
        "w = torch.zeros(128, 64)\n"
        "for step in range(2):\n"
        "    if w.sum().item() > 0.5:  # alike at step 0, rank-local at step 1\n"
        "        dist.all_reduce(torch.ones(2))\n"
        "    w.add_(torch.full((128, 64), float(rank)))"
    ),
    "another_view": (
        "w = torch.nn.Parameter(torch.arange(128 * 64, dtype=torch.float32).reshape(128, 64))\n"
        "w.data = w.data[64 * rank : 64 * (rank + 1)]  # the same storage, its own half\n"
        "if w.sum().item() > 20_000_000:"
    ),
    "init_generator": (
        "w = torch.empty(128, 64)\n"
        "torch.nn.init.normal_(w, 0.0, 1.0, torch.Generator().manual_seed(rank))\n"
        "if w.sum().item() > -30.0:"
    ),
    "default_dtype": (
        "torch.set_default_dtype(torch.float64 if rank else torch.float32)\n"
        "x = torch.full((128, 64), 16777217.0)\n"
        "if x.max().item() > 16777216.5:"
    ),
    "dtensor_step": (
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import DTensor, Shard\n"
        "mesh = init_device_mesh('cpu', (2,))\n"
        "w = torch.nn.Parameter(DTensor.from_local(torch.zeros(128, 64), mesh, [Shard(0)]))\n"
        "opt = torch.optim.SGD([w], lr=1.0)\n"
        "(w.to_local() * torch.full((128, 64), float(rank))).sum().backward()\n"
        "opt.step()\n"
        "if w.to_local().sum().item() > -0.5:"
    ),
}


def test_numbers_made_differently_are_never_taken_as_alike(tmp_path: Path):
    """Each number here differs between the ranks of a real run; none may be taken as made
    alike (that would hide the hang): each test is CL211."""

    found = {}
    for name, body in _MADE_DIFFERENTLY.items():
        program = tmp_path / f"{name}.py"
        program.write_text(
            "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
            f"rank = dist.get_rank()\n{body}\n"
            + ("" if "all_reduce" in body else "    dist.all_reduce(torch.ones(2))\n")
            + "dist.barrier()\n"
        )
        result, trace = past_budget(program)
        found[name] = [f.code for f in check_trace(trace, None).findings]
        assert not any("made alike" in n for n in result.notes), (name, result.notes)
    assert found == {name: ["CL211"] for name in _MADE_DIFFERENTLY}


_FSDP_NORM = """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo"); torch.manual_seed(dist.get_rank())  # each rank's own data
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
for layer in model:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(4, 64)).sum()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if {tested}.item() > 100.0:
        dist.barrier()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def test_an_fsdp2_gradient_norm_is_the_same_everywhere_and_a_loss_is_not(tmp_path: Path):
    """clip_grad_norm_ over FSDP2's sharded gradients returns a DTensor replicated over every
    rank (its .item() all-reduces first): testing it is taken alike, clean. Testing the
    rank's own loss the same way is CL211, the barrier against the next step's all-gather."""

    found = {}
    for tested in ("norm", "loss"):
        program = tmp_path / f"fsdp_{tested}.py"
        program.write_text(_FSDP_NORM.format(tested=tested))
        result, trace = past_budget(program, timeout=30.0)
        assert result.mode == "fake" and not result.incomplete(), result.incomplete()
        found[tested] = [(f.code, f.line) for f in check_trace(trace, None).findings]
    assert found == {"norm": [], "loss": [("CL211", 18)]}


def test_follow_on_mismatches_are_folded_under_their_root_cause(tmp_path: Path):
    program = tmp_path / "shift.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        "    dist.all_reduce(torch.ones(7))  # the one divergence\n"
        "for n in (2, 3, 4, 5):\n"
        "    dist.all_reduce(torch.ones(n))\n"
        "dist.barrier()\n"
    )
    from commlint.plans.dryrun.merge import fold_follow_ons

    _, trace = record(str(program))
    raw = check_trace(trace, None).findings
    assert [f.code for f in raw].count("CL204") == 4  # unfolded: one per shifted collective
    folded = fold_follow_ons(raw, trace)
    mismatches = [f for f in folded if f.code in ("CL203", "CL204")]
    assert len(mismatches) == 1
    root = mismatches[0]
    assert root.actions[0].site.endswith(":5")
    assert "4 follow-on mismatches (#2–#5) caused by this one are folded here" in root.message
    assert [r.line for r in root.related] == [7, 7, 7, 7]
    assert len(folded) == len(raw) - 4


def test_peers_values_are_delivered_live_within_one_pass():
    """Rank 0 broadcasts a plan the others follow. With both ranks running at once, the
    broadcast delivers it in the same pass (a second pass used to be needed)."""
    result, trace = record(str(PROGRAMS / "ok_object_plan.py"), max_passes=1)
    assert result.converged and result.passes == 1 and not trace.ends
    assert check_trace(trace, None).findings == []


def test_a_waiting_rank_does_not_count_against_jobs():
    """One rank at a time (-j 1): rank 1 waits for the plan rank 0 broadcasts. A waiting
    rank uses no CPU, so rank 0 is started while it waits, and the plan arrives in the same
    pass (it used to take a second one)."""
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(PROGRAMS / "ok_object_plan.py"), args=[], world_size=2, nproc_per_node=2,
        ranks=[0, 1], timeout=20.0, jobs=1, max_passes=1,
    )  # fmt: skip
    result = dry_run(options)
    assert result.converged and result.passes == 1 and not result.incomplete()
    assert check_trace(result.trace(options), None).findings == []


def test_values_that_did_not_settle_make_the_run_incomplete():
    # Both ranks receive first: each waits for the other, so neither gets a value in this
    # pass; what they send after is only delivered by a second pass, which --max-passes 1
    # does not allow.
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=str(PROGRAMS / "bad_recv_recv.py"), args=[], world_size=2, nproc_per_node=2,
        ranks=[0, 1], timeout=20.0, jobs=2, max_passes=1,
    )  # fmt: skip
    result = dry_run(options)
    trace = result.trace(options)
    assert not result.converged
    stopped = result.incomplete()
    assert stopped and all("still changed after 1 pass (--max-passes)" in i.why for i in stopped)
    assert set(trace.meta["incomplete"]) == {str(i.rank) for i in stopped}


def test_data_loader_workers_and_samplers_stay_on_fake_tensors():
    # Rank processes may have children; workers and samplers compute real (cheap) data.
    result, trace = record(str(PROGRAMS / "ok_dataloader_workers.py"))
    assert result.mode == "fake" and not result.notes and not trace.ends
    buckets = [a for a in trace.ranks[0] if a.label == "DDP gradient bucket"]
    assert len(buckets) == 2  # 16 samples, 2 ranks, batches of 4
    assert check_trace(trace, None).findings == []


def test_gradient_buckets_are_delivered_when_the_program_checks_them():
    # Under real tensors DDP's bucket all-reduce delivers the peers' gradients: the program's
    # own check that every rank holds the same averaged gradient passes.
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    program = str(PROGRAMS / "ok_grad_sync_check.py")
    options = DryRunOptions(
        program=program, args=[], world_size=2, nproc_per_node=2, ranks=[0, 1], timeout=20,
        jobs=2, mode="real",
    )  # fmt: skip
    result = dry_run(options)
    trace = result.trace(options)
    assert not trace.ends and result.converged, trace.ends
    assert result.mode == "real"
    assert check_trace(trace, None).findings == []
    # by default that check (an `allclose` of values no communication depends on) is decided
    # on fake tensors: no real compute (issue 30, item 5)
    result, trace = record(program)
    assert result.mode == "fake" and not trace.ends, result.notes
    assert check_trace(trace, None).findings == []


def test_split_runs_keep_every_parts_steering_evidence():
    """`commlint plan DIR` of per-rank files: each part's `meta.steering` (CL211) survives
    the merge, not only the first part's."""
    from commlint.plans.dryrun.merge import merge_partial
    from commlint.trace import Trace

    def part(rank: int) -> Trace:
        entry = {
            "rank": rank, "read": "t.py:5", "test": "t.py:5", "taken": False,
            "then": "nothing more", "otherwise": "barrier on group WORLD",
            "otherwise_site": "t.py:6", "index": 0,
        }  # fmt: skip
        return Trace(
            world_size=2,
            groups={"WORLD": [0, 1]},
            ranks={rank: []},
            source="dryrun",
            meta={"partial": True, "program": "t.py", "args": [], "steering": [entry]},
        )

    merged = merge_partial([("rank-0.yaml", part(0)), ("rank-1.yaml", part(1))])
    assert [e["rank"] for e in merged.meta["steering"]] == [0, 1]
    found = check_trace(merged, None).findings
    assert sorted((f.code, f.ranks[0], f.line) for f in found) == [("CL211", 0, 5), ("CL211", 1, 5)]


def test_a_tensor_tested_directly_is_a_decision_too(tmp_path: Path):
    """`if loss > 1.0:` tests the fake tensor itself (no `.item()`): past the budget it is
    explored like an unread number — CL211 at the test; with the budget, real values."""
    text = (PROGRAMS / "bad_local_loss_steers.py").read_text()
    program = tmp_path / "tensor_test.py"
    program.write_text(text.replace("if loss.item() > 1.0:", "if loss > 1.0:"))
    test = line_of(program, "if loss > 1.0:")
    symbolic = cli("--nproc-per-node", "2", "--real-budget", "0", str(program))
    assert symbolic.returncode == 1 and f"{program}:{test}:1: CL211" in symbolic.stdout
    real = cli("--nproc-per-node", "2", str(program))
    assert real.returncode == 1 and "CL203" in real.stdout
    assert f"stopped under fake tensors at {program}:{test}" in real.stderr


def test_assertions_on_uncomputed_values_are_taken_to_hold(tmp_path: Path):
    """A program's own value checks (`assert loss.item() < 1e6`, `assert (t > -1).all()`,
    `assert not (t < -5)`) are taken to pass past the budget, each said in meta.assumes —
    never explored (their other outcome only raises) and never a false CL211."""
    program = tmp_path / "asserts.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "torch.manual_seed(dist.get_rank())\n"
        "loss = torch.nn.Linear(16, 1)(torch.randn(8, 16)).pow(2).mean()\n"
        "assert loss.item() < 1e6, 'loss exploded'\n"
        "assert (loss > -1).all()\n"
        "assert not (loss < -5)\n"
        "dist.all_reduce(torch.ones(1))\n"
    )
    saved = tmp_path / "saved"
    out = cli(
        "--nproc-per-node", "2", "--real-budget", "0", "--save-trace", str(saved), str(program)
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assumes = yaml.safe_load((saved / "rank-00000.yaml").read_text())["meta"]["assumes"]
    for line in (6, 7, 8):
        assert (
            f"the assertion at {program}:{line} on a value fake tensors did not compute" in assumes
        )


def assert_decided_on_fake_tensors(bad_name: str, ok_name: str):
    """Both programs recorded on fake tensors alone (no real re-run): the bad one's rank 0
    waits in the barrier while rank 1 makes the extra all_reduce its value decided (CL203 at
    those lines), the ok one is clean. Returns the ok one's trace."""
    bad = PROGRAMS / bad_name
    result, trace = record(str(bad))
    assert result.mode == "fake" and not result.notes and not trace.ends, result.notes
    [finding] = [f for f in check_trace(trace, None).findings if f.severity == "error"]
    assert finding.code == "CL203"
    assert {(a.rank, a.site) for a in finding.actions} == {
        (0, f"{os.path.relpath(bad)}:{line_of(bad, 'dist.barrier()')}"),
        (1, f"{os.path.relpath(bad)}:{line_of(bad, 'dist.all_reduce(')}"),
    }
    result, trace = record(str(PROGRAMS / ok_name))
    assert result.mode == "fake" and not result.notes and not trace.ends, result.notes
    assert check_trace(trace, None).findings == []
    return trace


def test_small_random_draws_are_drawn_for_real_and_decide_on_fake_tensors():
    """`float(torch.rand(1, generator=g))`: the draw is drawn as a real run draws it, so a
    per-rank probe decides per rank and a probe seeded alike decides alike — with the model on
    fake tensors throughout (no real re-run)."""
    trace = assert_decided_on_fake_tensors("bad_probe_draw.py", "ok_probe_draw.py")
    # the draws were the generator's own: 3 steps, the same branch on both ranks
    assert len(trace.ranks[0]) == len(trace.ranks[1]) >= 3


def test_small_values_made_from_numbers_are_known_through_ops_and_numpy():
    """`torch.arange(4) * 2 + 8 * rank`, gathered, concatenated and read with `.numpy()`:
    every op's result of at most 64 elements keeps its value (torch's constant propagation
    stops at one element), so the program's own checks and the decisions they steer are
    taken on fake tensors as on the GPUs — the rank-local one is caught at its line, the
    uniform one passes, and neither needs a real re-run."""
    trace = assert_decided_on_fake_tensors("bad_numpy_steers.py", "ok_gathered_numpy.py")
    # the gathered numbers went over 10 on both ranks: the extra all_reduce on each
    assert [a.op for a in trace.ranks[0]] == [a.op for a in trace.ranks[1]]
    assert [a.op for a in trace.ranks[0]].count("all_reduce") == 1


def test_a_placeholder_never_becomes_a_known_value(tmp_path: Path):
    """`k.sub_(0.01 * float(g))` on a small tensor that knows its value (a kernel drawn with
    `torch.randn(4)`), with `g` not computed: the number given is a placeholder, so `k` forgets
    its value instead of keeping a wrong one — logging it needs no real compute; testing it
    later does (the test falls back at its own line)."""
    body = (
        "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "w = torch.nn.Linear(256, 256)\n"
        "k = torch.randn(4) * 0.3\n"
        "g = w(torch.randn(8, 256)).mean()\n"
        "k.sub_(0.01 * float(g))\n"
        "print(float(k.sum()))\n"
        "{test}"
        "dist.all_reduce(torch.ones(2))\n"
    )
    logged = tmp_path / "logged.py"
    logged.write_text(body.format(test=""))
    result, trace = record(str(logged))
    assert result.mode == "fake" and not result.notes and not trace.ends, result.notes
    tested = tmp_path / "tested.py"
    tested.write_text(body.format(test="if k.sum().item() > 0.0:\n    dist.barrier()\n"))
    result, trace = record(str(tested))
    assert result.mode == "real", result.notes
    assert f"stopped under fake tensors at {tested}:9" in result.notes[0]


@pytest.mark.parametrize("budget", [None, "0"])
def test_a_value_fake_tensors_cannot_give_after_a_proven_hang_needs_no_real_run(
    tmp_path: Path, budget: str | None
):
    """Rank 1 would read a header that never arrives (the payload came first): a real run
    fails at the mismatched receive before the read, so the dry-run reports the mismatch,
    says where fake tensors stopped and why it does not matter — no real re-run, whatever
    the budget, and no "did not reach the end" error."""
    program = PROGRAMS / "bad_header_after_payload.py"
    extra = ["--real-budget", budget] if budget else []
    out = cli("--nproc-per-node", "2", *extra, str(program))
    assert out.returncode == 1, out.stderr
    assert errors(out) == []
    rel = os.path.relpath(program)
    assert f"{rel}:{line_of(program, 'dist.send(act')}: CL204" in out.stdout
    assert "recorded again with small real CPU tensors" not in out.stderr
    stop = line_of(program, "int(header[0])")
    assert (
        f"rank 1 stopped under fake tensors at {rel}:{stop} (DataDependentOutputException"
        in out.stderr
    )
    assert "CL204 argument-mismatch" in out.stderr and "a real run never gets there" in out.stderr


def stopped_without_budget(program: Path, line: int, rank: int, why: str = "") -> str:
    """`commlint run --real-budget 0`: exit 2, with an error naming `rank` stopped at `line`
    (and `why`), never excused as behind a hang. Returns the output."""
    out = cli("--nproc-per-node", "2", "--real-budget", "0", str(program))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "never gets there" not in out.stderr
    assert any(
        f"{program}:{line}: rank {rank} did not reach the end" in e and why in e
        for e in errors(out)
    ), out.stderr
    return out.stdout


def test_a_stop_that_no_hang_precedes_is_not_excused(tmp_path: Path):
    """The other side: the header is computed by the model (fake, no value) and arrives in
    order, so nothing is wrong before rank 1 reads it: with no budget for real tensors the
    rank is reported as not seen to its end (exit 2), never excused."""
    program = tmp_path / "computed_header.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        "    act = torch.nn.Linear(8, 8)(torch.randn(4, 8))\n"
        "    dist.send(act[0, :2].abs().ceil() + 4, dst=1)\n"
        "else:\n"
        "    header = torch.zeros(2)\n"
        "    dist.recv(header, src=0)\n"
        "    for _ in range(int(header[0])):\n"
        "        dist.barrier()\n"
    )
    stopped_without_budget(program, 10, 1)


def test_data_dependent_sizes_stay_symbolic_until_they_steer_or_are_sent(tmp_path: Path):
    """nonzero / unique / bincount / boolean masks get torch's unbacked sizes: a loss over
    the kept tokens costs no real compute. Only a test of such a size, or a tensor of such a
    size given to a communication, stops fake tensors — said at that line."""
    ok = PROGRAMS / "ok_masked_loss.py"
    result, trace = record(str(ok))
    assert result.mode == "fake" and not result.notes and not trace.ends, result.notes
    assert check_trace(trace, None).findings == []
    assert len([a for a in trace.ranks[0] if a.label == "DDP gradient bucket"]) >= 3

    program = tmp_path / "sent.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "h = torch.nn.Linear(64, 64)(torch.randn(32, 64))\n"
        "keep = (h[:, 0] > 0).nonzero().squeeze(1)\n"
        "dist.all_reduce(h[keep])\n"
        "if keep.numel() > 8:\n"
        "    dist.barrier()\n"
    )
    sent = "DataDependentSize: the tensor given to all_reduce has a data-dependent size"
    stopped_without_budget(program, 6, 0, sent)
    program.write_text(program.read_text().replace("dist.all_reduce(h[keep])\n", ""))
    tested = "a data-dependent size (nonzero, unique, bincount, a boolean mask) decides"
    stopped_without_budget(program, 6, 1, tested)
    # under the real re-run budget (the default), real tensors give the sizes
    out = cli("--nproc-per-node", "2", str(program))
    assert out.returncode in (0, 1) and errors(out) == [], out.stderr
    assert "recorded again with small real CPU tensors" in out.stderr


def test_a_stop_after_a_call_that_completes_wrongly_is_not_excused(tmp_path: Path):
    """A reduce-op mismatch (CL203) completes, with a meaningless result: the ranks go on, so
    a stop after it is still a stop (exit 2), not excused as behind a hang."""
    program = tmp_path / "mixed_ops.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "t = torch.ones(2)\n"
        "dist.all_reduce(t, op=dist.ReduceOp.MAX if rank == 0 else dist.ReduceOp.SUM)\n"
        "loss = torch.nn.Linear(8, 1)(torch.randn(4, 8)).sum()\n"
        "for _ in range(int(loss)):\n"
        "    dist.barrier()\n"
    )
    assert f"{program}:6: CL203" in stopped_without_budget(program, 8, 0)


def test_a_number_given_to_an_accelerators_tensor_type_makes_a_tensor_that_knows_no_value():
    """DeepSpeed's `get_accelerator().FloatTensor([float(total_norm)])`: the callable is a
    call's result the flow analysis cannot name; its name (one of torch's legacy tensor
    types) makes it a tensor's maker, confirmed when the call makes the tensor. Past the
    budget the ok program was exit 2 at `float()`; the bad one is a decision (CL211). (Both
    run for real under gloo in test_agreement: the bad one hangs, the ok one finishes.)"""
    ok = PROGRAMS / "ok_accelerator_tensor_reduced_steers.py"
    result, trace = past_budget(ok)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    assert check_trace(trace, None).findings == []
    bad = PROGRAMS / "bad_accelerator_tensor_steers.py"
    result, trace = past_budget(bad)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    found = check_trace(trace, None).findings
    assert [(f.code, f.line) for f in found] == [("CL211", line_of(bad, "if logged[0]"))]


IMPOSTOR = """\
import torch
import torch.distributed as dist


class Registry:
    def FloatTensor(self, values):  # not a tensor's maker: it tests the number
        if values[0] > 0:
            dist.barrier()
        return values


def registry():
    return Registry()


dist.init_process_group("gloo")
torch.manual_seed(4 * dist.get_rank())
loss = torch.nn.Linear(64, 64)(torch.randn(8, 64)).sum()
registry().FloatTensor([float(loss)])
dist.destroy_process_group()
"""


def test_a_call_taken_for_a_tensor_maker_by_its_name_that_makes_none_is_never_a_pass(tmp_path):
    """The name alone is a guess: a `FloatTensor` that tests the number instead (here, a
    barrier on rank 0 only in a real run) made no tensor of it, and every rank says where the
    number went instead of passing."""
    program = tmp_path / "impostor.py"
    program.write_text(IMPOSTOR)
    out = cli("--nproc-per-node", "2", "--real-budget", "0", str(program))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "All checks passed" not in out.stdout
    line = line_of(program, "registry().FloatTensor")
    for rank in (0, 1):
        assert any(
            f"impostor.py:{line}: rank {rank} did not reach the end" in e
            and "taken for a tensor's maker by its name" in e
            for e in errors(out)
        ), out.stderr


FLAGS = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(4 * dist.get_rank())
loss = torch.nn.Linear(64, 64)(torch.randn(8, 64)).sum()
flags = torch.zeros(2)  # small: computed for real
flags[0] = loss.item()  # the rank's own
if flags[0] > 0:
    dist.barrier()
dist.destroy_process_group()
"""


def test_a_number_written_into_a_small_real_tensor_is_not_a_value_known(tmp_path):
    """`flags[0] = loss.item()` into a tensor the dry-run computes for real: the flag does
    not hold the placeholder as a value known (the test would be taken alike on every rank);
    past the budget its test is a decision."""
    program = tmp_path / "flags.py"
    program.write_text(FLAGS)
    result, trace = past_budget(program)
    assert result.mode == "fake" and not result.incomplete(), result.incomplete()
    found = check_trace(trace, None).findings
    assert [(f.code, f.line) for f in found] == [("CL211", line_of(program, "if flags[0]"))]
