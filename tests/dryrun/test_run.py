"""What the dry-run records, and `commlint run` as a user sees it (no real gloo runs here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from cli_server import run_commlint

from commlint.commands.run import parse_ranks
from commlint.findings import CommlintInputError
from commlint.graph.check import check_trace
from commlint.plans.dryrun.merge import merge_partial, rank_spec, split_site
from commlint.trace import Action, Trace

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"
FIXTURES = HERE / "fixtures"


@cache
def record(program: str, world: int = 2, timeout: float = 20.0, **kw):
    from commlint.plans.dryrun.driver import DryRunOptions, dry_run

    options = DryRunOptions(
        program=program,
        args=list(kw.pop("args", ())),
        world_size=world,
        nproc_per_node=kw.pop("nproc_per_node", world),
        ranks=list(range(world)),
        timeout=timeout,
        jobs=2,
        **kw,
    )
    result = dry_run(options)
    return result, result.trace(options)


def ops(trace: Trace, rank: int) -> list[str]:
    return [a.op for a in trace.ranks[rank]]


def line_of(program: Path, text: str) -> int:
    return next(i for i, ln in enumerate(program.read_text().splitlines(), 1) if text in ln)


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_commlint(["run", *args], timeout=300)


def test_batched_p2p_keeps_the_batch_and_the_waits():
    program = PROGRAMS / "ok_batch_p2p.py"
    _, trace = record(str(program))
    actions = trace.ranks[0]
    p2p = [a for a in actions if a.op in ("isend", "irecv")]
    assert [a.op for a in p2p] == ["isend", "irecv"]
    assert p2p[0].batch and p2p[0].batch == p2p[1].batch
    assert p2p[0].peer == 1 and p2p[1].peer == 1
    waits = [h for a in actions if a.op == "wait" for h in a.handles]
    assert waits == [p2p[0].handle, p2p[1].handle]
    assert p2p[0].site == f"{program.relative_to(Path.cwd())}:{line_of(program, 'for req in')}"
    assert any("batch_isend_irecv" in frame for frame in p2p[0].stack)


def test_subgroups_are_recorded_by_global_ranks_and_roots_are_global():
    _, trace = record(str(PROGRAMS / "ok_subgroups.py"), world=4)
    assert trace.groups == {"g0_1": [0, 1], "g2_3": [2, 3]}
    bcast = next(a for a in trace.ranks[3] if a.op == "broadcast")
    assert (bcast.group, bcast.root) == ("g2_3", 2)
    assert check_trace(trace, None).findings == []


def test_ddp_buckets_are_async_and_waited_before_the_next_step():
    _, trace = record(str(PROGRAMS / "ok_ddp.py"))
    actions = trace.ranks[1]
    assert trace.backend == "gloo" and trace.source == "dryrun"
    assert (actions[0].op, actions[0].label) == ("all_gather", "DDP model check")
    buckets = [a for a in actions if a.label == "DDP gradient bucket"]
    assert len(buckets) >= 3 and all(a.is_async and a.handle for a in buckets)
    assert [a.bucket for a in buckets] == [0, 0, 0]  # one bucket per backward: 0 each step
    waited = {h for a in actions if a.op == "wait" for h in a.handles}
    assert {a.handle for a in buckets} <= waited
    assert buckets[0].site.endswith(f":{line_of(PROGRAMS / 'ok_ddp.py', 'backward()')}")


def test_an_object_broadcast_steers_the_receivers():
    result, trace = record(str(PROGRAMS / "ok_object_plan.py"))
    sizes = [a.shape for a in trace.ranks[1] if a.op == "all_reduce"]
    assert sizes == [[4], [8], [2]]  # rank 0's plan, not rank 1's own [None]
    assert result.passes == 1 and result.converged  # delivered live, in the same pass


def test_reduced_flags_steer_loops_until_every_rank_agrees():
    result, trace = record(str(PROGRAMS / "ok_uneven_join.py"))
    assert len(trace.ranks[0]) == len(trace.ranks[1]) == 9
    assert result.converged and not trace.ends


def test_torchrun_environment_per_rank():
    _, trace = record(str(FIXTURES / "env_shapes.py"), world=4, nproc_per_node=2)
    shapes = {r: trace.ranks[r][0].shape for r in range(4)}
    assert shapes == {0: [1], 1: [2], 2: [11], 3: [12]}
    assert trace.backend == "nccl" and not trace.ends


def test_cuda_calls_work_without_a_gpu_streams_and_threads_are_recorded():
    _, trace = record(str(FIXTURES / "sync_and_async.py"))
    assert ops(trace, 0) == ["all_reduce", "sync", "wait", "all_reduce", "all_reduce"]
    first, *_, on_side_stream, from_thread = trace.ranks[0]
    assert first.is_async and first.stream is None and not trace.ends
    assert on_side_stream.stream == "stream1" and on_side_stream.thread is None
    assert from_thread.thread == "comm-thread" and from_thread.stream is None
    assert check_trace(trace, None).findings == []


def test_functional_collectives_on_fake_tensors_are_recorded_with_their_waits():
    result, trace = record(str(FIXTURES / "functional.py"), world=4)
    assert result.mode == "fake"
    acts = trace.ranks[1]
    coll = [a for a in acts if a.op != "wait"]
    assert [(a.op, a.group) for a in coll] == [("all_reduce", "g0_1"), ("all_gather", "g1_3")]
    assert all(a.label and a.label.startswith("functional") for a in coll)
    assert [a.handles for a in acts if a.op == "wait"] == [[coll[0].handle], [coll[1].handle]]


def test_steps_stops_an_endless_training_loop():
    _, trace = record(str(FIXTURES / "endless_training.py"), steps=2)
    buckets = [a for a in trace.ranks[0] if a.label == "DDP gradient bucket"]
    assert len(buckets) == 2 and not trace.ends


def test_a_rank_that_loops_forever_is_stopped_and_its_peer_reported():
    program = PROGRAMS / "bad_infinite_loop.py"
    _, trace = record(str(program), timeout=2.0)
    end = trace.ends[1]
    assert end.kind == "timeout"
    assert end.site.endswith(f":{line_of(program, 'while not')}") or end.site.endswith(
        f":{line_of(program, 'pass')}"
    )
    codes = {f.code for f in check_trace(trace, None).findings}
    assert codes & {"CL202", "CL210"}


def test_an_exception_ends_the_rank_and_strands_its_peer():
    program = PROGRAMS / "bad_stranded_exception.py"
    result, trace = record(str(program))
    assert trace.ends[1].kind == "exception"
    assert trace.ends[1].message == "ValueError: corrupt sample in shard 1"
    assert trace.ends[1].site.endswith(f":{line_of(program, 'raise ValueError')}")
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL210"]
    assert not result.notes  # the program's own exception, not a limit of fake tensors


def test_ddp_unused_parameters_raise_ddps_own_error_at_the_users_line():
    program = PROGRAMS / "bad_ddp_unused.py"
    result, trace = record(str(program))
    end = trace.ends[1]  # rank 1 skips layer b: its gradient never comes
    assert end.kind == "exception"
    assert end.message.startswith(
        "RuntimeError: Expected to have finished reduction in the prior iteration"
    )
    assert "parameters 2, 3" in end.message and "find_unused_parameters=True" in end.message
    assert end.site.endswith(f":{line_of(program, '.backward()')}")
    assert 0 not in trace.ends
    assert result.mode == "fake" and not result.notes  # DDP's check, not a fake-tensor limit
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL210"]
    assert "find_unused_parameters=True" in findings[0].message


def test_recv_from_any_source_pairs_with_each_sender_once():
    program = PROGRAMS / "ok_anysource_monitored.py"
    result, trace = record(str(program), world=4)
    # The program asserts that recv(src=None) returned every sender once.
    assert not trace.ends and result.converged and result.mode == "fake"
    recvs = [a for a in trace.ranks[0] if a.op == "recv"]
    assert [a.peer for a in recvs] == [1, 2, 3]
    assert all(a.label == "recv from any source" for a in recvs)
    assert recvs[0].site.endswith(f":{line_of(program, 'dist.recv(buf, src=None)')}")
    assert "could pair with ranks 1, 2, 3" in trace.meta["assumes"]
    barriers = [(a.group, a.label) for a in trace.ranks[1] if a.op == "barrier"]
    assert barriers == [("WORLD", "monitored_barrier"), ("g0_1", "monitored_barrier")]
    assert [a.op for a in trace.ranks[3]] == ["send", "recv", "barrier"]
    assert check_trace(trace, None).findings == []


def test_recv_from_any_source_that_nobody_answers_is_a_hang():
    program = PROGRAMS / "bad_recv_anysource.py"
    _, trace = record(str(program))
    recvs = [a for a in trace.ranks[0] if a.op == "recv"]
    assert [a.peer for a in recvs] == [1, 1]
    assert "no rank sends rank 0 a message" in trace.meta["assumes"]
    findings = check_trace(trace, None).findings
    assert [f.code for f in findings] == ["CL202"]
    assert findings[0].actions[0].site.endswith(f":{line_of(program, 'dist.recv(buf, src=None)')}")


def test_monitored_barrier_needs_gloo_as_in_torch(tmp_path: Path):
    program = tmp_path / "monitored_nccl.py"
    program.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('nccl')\n"
        "dist.monitored_barrier()\n"
    )
    result, trace = record(str(program))
    assert {r: e.message for r, e in trace.ends.items()} == {
        r: "ValueError: monitored_barrier is only implemented for GLOO backend." for r in (0, 1)
    }
    assert not result.notes  # raised again with real tensors: the program's own error
    skipped = PROGRAMS / "bad_monitored_barrier.py"
    _, trace = record(str(skipped))
    assert [a.op for a in trace.ranks[1]] == ["all_reduce"]
    assert [f.code for f in check_trace(trace, None).findings] == ["CL202"]


def test_parse_ranks():
    assert parse_ranks("0-3,8,10-11", 16) == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("5-2", "0-16", "x", ""):
        with pytest.raises(ValueError):
            parse_ranks(bad, 16)


def test_rank_spec_and_split_site():
    assert rank_spec([11, 0, 1, 2, 8, 10]) == "0-2,8,10-11"
    assert parse_ranks(rank_spec([0, 1, 2, 5]), 8) == [0, 1, 2, 5]
    assert split_site("dir/train.py:41") == ("dir/train.py", 41)
    assert split_site("train.py:x") == ("train.py", None)
    assert split_site("train.py") == split_site(None) == (None, None)


def test_merge_refuses_a_rank_recorded_twice():
    part = Trace(world_size=2, ranks={0: [Action(op="barrier")]}, meta={"partial": True})
    with pytest.raises(CommlintInputError, match="rank 0 is recorded both"):
        merge_partial([("a.yaml", part), ("b.yaml", part)])


def test_cli_reports_a_deadlock_at_the_users_line():
    program = PROGRAMS / "bad_pipeline_send_send.py"
    out = cli("--nproc-per-node", "2", "--format", "json", str(program))
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert [f["code"] for f in report["findings"]] == ["CL201"]
    assert report["findings"][0]["path"] == os.path.relpath(program)
    assert report["findings"][0]["line"] == line_of(program, "dist.send(")


def test_cli_missing_program_and_program_that_always_crashes(tmp_path: Path):
    out = cli("--nproc-per-node", "2", str(tmp_path / "nope.py"))
    assert out.returncode == 2 and "nope.py: no such file" in out.stderr
    crash = tmp_path / "crash.py"
    crash.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n1 / 0\n")
    out = cli("--nproc-per-node", "2", str(crash))
    assert out.returncode == 2
    errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
    assert errors == [
        f"commlint: error: {crash}:3: every rank raised ZeroDivisionError: division by zero"
    ]
    assert "Traceback" not in out.stderr


def test_a_part_of_the_job_without_save_trace_is_refused_before_any_work(tmp_path: Path):
    # It would record ranks and check nothing ("Nothing was checked.", exit 0).
    program = str(PROGRAMS / "ok_allreduce.py")
    out = cli("--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", program)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "commlint: error: --node-rank records ranks 2-3 of 4 and checks nothing on its own: "
        "add --save-trace DIR, then check every part together with `commlint plan DIR`"
    ]


def test_cli_bad_ranks_is_a_usage_error():
    out = cli("--nproc-per-node", "4", "--ranks", "2-9", str(PROGRAMS / "ok_allreduce.py"))
    assert out.returncode == 2 and "outside 0-3" in out.stderr


def test_a_sampled_run_says_which_rank_raised(tmp_path: Path):
    # Nothing is checked when only some ranks are recorded, but a recorded rank that raised
    # did not run its program: an error (exit 2), not "Nothing was checked" and exit 0
    program = tmp_path / "half.py"
    program.write_text(
        "import torch.distributed as dist\n"
        'dist.init_process_group("gloo")\n'
        "if dist.get_rank() == 1:\n"
        '    raise RuntimeError("boom")\n'
    )
    out = cli(
        "--nproc-per-node", "4", "--ranks", "0-1", "--save-trace", str(tmp_path / "t"),
        str(program),
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("commlint: error")]
    assert errors == [
        f"commlint: error: {program}:4: rank 1 raised RuntimeError: boom; the rest of its "
        "program was not recorded"
    ]
    assert "Nothing was checked" not in out.stdout


def test_run_from_the_folder_that_holds_the_scratch_folder(tmp_path: Path):
    # Run from /tmp (the scratch folder inside the working folder): the per-rank file layer
    # tested its own list of folders through the os.stat it replaces, without end, and
    # every rank stopped with a RecursionError before the program's first line
    program = tmp_path / "main_first.py"
    program.write_text((PROGRAMS / "ok_main_process_first_exists.py").read_text())
    (tmp_path / "tmp").mkdir()
    root = str(HERE.parent.parent)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": root}
    out = subprocess.run(
        [sys.executable, "-m", "commlint", "run", "--nproc-per-node", "2", program.name],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "All checks passed" in out.stdout
    assert not (tmp_path / ".cache-exists.txt").exists()


def test_partial_dry_runs_saved_per_rank_are_checked_together(tmp_path: Path):
    program = str(PROGRAMS / "bad_mesh_branch.py")
    for ranks in ("0-1", "2-3"):
        out = cli("--nproc-per-node", "4", "--ranks", ranks, "--save-trace", str(tmp_path), program)
        assert out.returncode == 0, out.stderr
        note = f"recorded ranks {ranks} of 4; check every rank together with `commlint plan "
        assert f"{note}{tmp_path}`" in out.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"rank-0000{r}.yaml" for r in range(4)]
    plan = [sys.executable, "-m", "commlint", "plan", "--format", "json", str(tmp_path)]
    out = subprocess.run(plan, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert [f["code"] for f in report["findings"]] == ["CL201"]
    assert sorted(report["findings"][0]["ranks"]) == [0, 1, 2, 3]
    (tmp_path / "rank-00002.yaml").unlink()
    out = subprocess.run(plan, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "ranks 2 are missing" in out.stderr


def test_every_collective_api_delivers_peer_values():
    # The program asserts on what it receives (gathered ranks, reduced sums, objects):
    # it ends cleanly only if every value reached its receiver as under a real backend (live
    # within the pass: the small tensors it sends know their values on fake tensors).
    result, trace = record(str(FIXTURES / "many_apis.py"))
    assert not trace.ends and result.converged and result.mode == "fake" and not result.notes
    assert [a.op for a in trace.ranks[1]] == [
        "all_gather",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "reduce",
        "all_gather",  # gather_object: sizes to every rank, then the data to the root
        "gather",
        "broadcast",  # scatter_object_list: max size, sizes, data
        "scatter",
        "scatter",
        "recv",  # recv_object_list: size, then data
        "recv",
        "barrier",
    ]
    a2a = trace.ranks[1][3]
    assert a2a.in_splits == [1, 1] and a2a.out_splits == [1, 1]
    assert check_trace(trace, None).findings == []


def test_call_stacks_stop_at_the_users_script():
    # The stack of an action holds the torch API frame and the script's frames, never the
    # frames of whoever started the dry-run (here pytest).
    _, trace = record(str(PROGRAMS / "ok_sendrecv.py"))
    for action in trace.ranks[0]:
        assert action.stack, action
        assert all("ok_sendrecv.py" in f or f.startswith("torch/") for f in action.stack)


def test_small_real_values_decide_without_real_tensors():
    """`torch.tensor(n)` all-reduced, compared and used as a loop bound: computed for real
    (small real tensors), so the run stays on fake tensors and every rank loops 4 times."""
    result, trace = record(str(FIXTURES / "small_real_values.py"))
    assert result.mode == "fake"
    for rank in (0, 1):
        assert ops(trace, rank) == ["all_reduce"] * 5
        assert [a.shape for a in trace.ranks[rank][1:]] == [[8]] * 4
    assert check_trace(trace, None).findings == []


def test_small_integer_draws_decide_without_real_tensors():
    """An MoE router's expert choice (`torch.randint` of 16 tokens) is drawn for real, so
    `bincount` of it, the all_to_all of the counts and the splits built from them have values
    on fake tensors; the splits each rank sends are what its peer expects."""
    result, trace = record(str(PROGRAMS / "ok_moe_token_counts.py"))
    assert result.mode == "fake"
    assert [ops(trace, r) for r in (0, 1)] == [["all_to_all", "all_to_all"]] * 2
    sent = {r: trace.ranks[r][1].in_splits for r in (0, 1)}
    expected = {r: trace.ranks[r][1].out_splits for r in (0, 1)}
    assert sent[0][1] == expected[1][0] and sent[1][0] == expected[0][1]
    assert check_trace(trace, None).findings == []


def test_cli_every_rank_raising_a_message_with_its_rank_is_not_an_all_clear(tmp_path: Path):
    """The same exception at the same line on every rank, its message naming the rank
    (`... cuda:0`, `... cuda:1`): nothing after it was seen, so no "All checks passed"."""
    crash = tmp_path / "crash.py"
    crash.write_text(
        "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "raise RuntimeError(f'parameters on cpu, expected cuda:{dist.get_rank()}')\n"
    )
    out = cli("--nproc-per-node", "2", str(crash))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "All checks passed" not in out.stdout
    errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
    assert errors == [
        f"commlint: error: {crash}:3: every rank raised RuntimeError: parameters on cpu, "
        "expected cuda:0 (on rank 0; the others' messages differ in numbers)"
    ]


def test_calls_torch_leaves_unwaited_are_not_the_programs_but_its_own_are(tmp_path):
    """DDP's Join issues an async all_reduce it never waits for (torch's design): no CL206
    at the user's line; an async call the program itself never waits for still is one."""
    _, trace = record(str(PROGRAMS / "ok_ddp_join.py"))
    assert check_trace(trace, None).findings == []
    assert any("issued by torch" in (a.label or "") for a in trace.ranks[0])
    program = tmp_path / "unwaited.py"
    program.write_text(
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "dist.all_reduce(torch.ones(2), async_op=True)\n"
    )
    _, trace = record(str(program))
    [finding] = check_trace(trace, None).findings
    assert finding.code == "CL206" and finding.actions[0].site.endswith("unwaited.py:4")


def test_the_fake_tensor_cache_tells_apart_what_torch_tells_apart():
    # The dry-run keys torch's fake-tensor cache its own, cheaper way: torch's cross-check
    # computes every cache hit again and fails the rank where the two outputs differ
    # (strides, offsets, views, dtypes, requires_grad, conjugation)
    import torch._dynamo.config

    with torch._dynamo.config.patch(fake_tensor_cache_crosscheck_enabled=True):
        result, trace = record(str(FIXTURES / "cache_keys.py"), timeout=60.0)
    assert result.mode == "fake"
    assert [r.end for r in result.runs.values()] == [None, None]
    hits = int(result.runs[0].output.split("cache hits ")[1].split()[0])
    assert hits > 50
    assert ops(trace, 0) == ["all_reduce"]


def test_a_finding_is_at_the_call_only_its_rank_made(tmp_path: Path):
    # The barrier that waits is in `sync`, a line every rank ran; what only rank 0 did is
    # the second call: the finding is there, the barrier's line a note
    program = tmp_path / "extra_call.py"
    program.write_text(
        "import torch.distributed as dist\n"
        'dist.init_process_group("gloo")\n'
        "def sync():\n"
        "    dist.barrier()\n"
        "for _ in range(2):\n"
        "    sync()\n"
        "if dist.get_rank() == 0:\n"
        "    sync()\n"
    )
    out = cli("--nproc-per-node", "2", "--format", "json", str(program))
    assert out.returncode == 1, out.stderr
    (finding,) = json.loads(out.stdout)["findings"]
    assert (finding["code"], finding["line"]) == ("CL202", 8)
    note = finding["related"][0]
    assert note["line"] == 4 and f"{program.name}:8" in note["message"]
    assert "a call no other rank made" in note["message"]
