"""Frameworks' own entry points under the dry-run, on tiny configs (issue 11): each clean
program clean under fake tensors (no real compute), each with an injected rank-0-only
collective caught at the user's line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_server import run_commlint

FIXTURES = Path(__file__).parent / "fixtures"


def dry_run(
    script: Path, *args: str, cwd: Path, save: Path | None = None, nproc: int = 2
) -> subprocess.CompletedProcess:
    """`commlint run` of a fixture, from `cwd` (the frameworks write output folders there)."""
    cmd = ["run", "--nproc-per-node", str(nproc)]
    cmd += ["--timeout", "120"]
    if save is not None:
        cmd += ["--save-trace", str(save)]
    return run_commlint([*cmd, str(script), *args], timeout=600, cwd=cwd)


def assert_clean_on_fake_tensors(script: Path, *args: str, cwd: Path, nproc: int = 2) -> str:
    """The dry-run passes without any real compute; returns rank 0's saved trace."""
    proc = dry_run(script, *args, cwd=cwd, save=cwd / "trace", nproc=nproc)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "All checks passed" in proc.stdout
    assert "recorded again with small real CPU tensors" not in out  # no real compute
    saved = (cwd / "trace" / "rank-00000.yaml").read_text()
    assert '"tensors": "fake"' in saved
    return saved


def test_lightning_trainer_ddp_is_clean_on_fake_tensors(tmp_path):
    pytest.importorskip("lightning")
    saved = assert_clean_on_fake_tensors(FIXTURES / "lightning_ddp.py", cwd=tmp_path)
    assert "DDP gradient bucket" in saved  # the Trainer's DDP backward was recorded


def test_lightning_trainer_fsdp_is_clean_on_fake_tensors(tmp_path):
    """strategy="fsdp" (FSDP1 on the GPU its device_id names): its flat parameters are
    gathered and its gradients reduce-scattered, on fake tensors."""
    pytest.importorskip("lightning")
    saved = assert_clean_on_fake_tensors(FIXTURES / "lightning_ddp.py", "fsdp", cwd=tmp_path)
    assert "all_gather" in saved and "reduce_scatter" in saved


def test_lightning_refusing_fsdp_on_cpu_needs_no_real_compute(tmp_path):
    """Lightning refuses strategy="fsdp" on a CPU accelerator (its own configuration check
    raises, no tensor involved): every rank raises it, exit 2, and nothing was computed for
    real to find that out (before: every rank recorded again with real tensors)."""
    pytest.importorskip("lightning")
    script = FIXTURES / "lightning_ddp.py"
    proc = dry_run(script, "fsdp", "cpu", cwd=tmp_path, save=tmp_path / "trace")
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "every rank raised ValueError: The strategy `fsdp` requires a GPU" in proc.stderr
    saved = (tmp_path / "trace" / "rank-00000.yaml").read_text()
    assert '"tensors": "fake"' in saved


def assert_rank0_call_is_caught(script: Path, cwd: Path) -> None:
    """The fixture run with `rank0` injects a collective on rank 0 only (the line marked
    `# rank 0 only`): the dry-run reports a CL2xx error at that line and exits 1."""
    proc = dry_run(script, "rank0", cwd=cwd)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    line = next(
        i for i, text in enumerate(script.read_text().splitlines(), 1) if "# rank 0 only" in text
    )
    assert f"{script.name}:{line}: CL20" in proc.stdout, proc.stdout


def test_lightning_rank0_only_collective_is_caught_at_the_users_line(tmp_path):
    pytest.importorskip("lightning")
    assert_rank0_call_is_caught(FIXTURES / "lightning_ddp.py", tmp_path)


def test_transformers_trainer_ddp_is_clean_on_fake_tensors(tmp_path):
    pytest.importorskip("transformers")
    saved = assert_clean_on_fake_tensors(FIXTURES / "hf_trainer_ddp.py", cwd=tmp_path)
    assert "DDP gradient bucket" in saved
    # what the dry-run took instead of computing is said, with the line that tested it
    assert "no NaN/inf in the value tested at" in saved


def test_transformers_trainer_told_to_use_the_cpu_stays_on_fake_tensors(tmp_path):
    """`TrainingArguments(use_cpu=True)`: accelerate's device is `cpu:0`, which fake tensors
    once kept apart from `cpu` (FakeTensorDeviceMismatchError, then real compute)."""
    pytest.importorskip("transformers")
    saved = assert_clean_on_fake_tensors(FIXTURES / "hf_trainer_ddp.py", "use_cpu", cwd=tmp_path)
    assert "DDP gradient bucket" in saved


def test_transformers_rank0_only_callback_collective_is_caught_at_its_line(tmp_path):
    pytest.importorskip("transformers")
    assert_rank0_call_is_caught(FIXTURES / "hf_trainer_ddp.py", tmp_path)


def test_accelerate_training_script_is_clean_on_fake_tensors(tmp_path):
    pytest.importorskip("accelerate")
    saved = assert_clean_on_fake_tensors(FIXTURES / "accelerate_train.py", cwd=tmp_path)
    assert "DDP gradient bucket" in saved


def test_accelerate_rank0_only_gather_is_caught_at_the_users_line(tmp_path):
    pytest.importorskip("accelerate")
    assert_rank0_call_is_caught(FIXTURES / "accelerate_train.py", tmp_path)


@pytest.mark.parametrize("script", ["test_sync", "test_script", "test_ddp_comm_hook", "test_ops"])
def test_accelerates_own_scripts_pass_as_on_gpus(script, tmp_path):
    """accelerate's shipped multi-GPU test scripts (gradient sync under accumulation and
    no_sync, data loader sharding and dispatch, mixed precision, DDP comm hooks) pass on 2
    GPUs; they check the values DDP and accelerate's collectives deliver over many steps
    (delivered live within a pass, exact once a rank raises), and `test_ops`'s debug mode
    checks that each tensor given to a collective is on the configured GPU."""
    scripts = pytest.importorskip("accelerate.test_utils.scripts")
    path = Path(scripts.__file__).parent / f"{script}.py"
    proc = dry_run(path, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "All checks passed" in proc.stdout


@pytest.mark.parametrize(
    ("args", "bucket_op", "count"), [((), "all_reduce", 4), (("distopt",), "reduce_scatter", 4)]
)
def test_megatron_ddp_is_clean_on_fake_tensors(args, bucket_op, count, tmp_path):
    """Megatron-core's own DistributedDataParallel, 2 steps: its gradient buckets are
    all-reduced (or reduce-scattered for the distributed optimizer) on fake tensors, each
    call named with Megatron's frame that started it."""
    pytest.importorskip("megatron.core")
    saved = assert_clean_on_fake_tensors(FIXTURES / "megatron_ddp.py", *args, cwd=tmp_path)
    assert saved.count(f'"op": "{bucket_op}"') == count
    assert '"via": "megatron/core/distributed/param_and_grad_buffer.py:' in saved


def test_megatron_ddp_rank0_only_collective_is_caught_at_the_users_line(tmp_path):
    pytest.importorskip("megatron.core")
    assert_rank0_call_is_caught(FIXTURES / "megatron_ddp.py", tmp_path)


def test_megatron_tensor_parallel_layers_are_clean_on_fake_tensors(tmp_path):
    """Column- and row-parallel linears with sequence parallelism: their custom backward
    functions make buffers with `device=torch.cuda.current_device()` (once a stop of the fake
    tensors, then the real re-run), their weight init forks Megatron's CUDA RNG tracker."""
    pytest.importorskip("megatron.core")
    saved = assert_clean_on_fake_tensors(FIXTURES / "megatron_tp.py", cwd=tmp_path)
    # forward: all-gather in, reduce-scatter out; backward the reverse, two steps
    assert saved.count('"op": "all_gather"') == 6 and saved.count('"op": "reduce_scatter"') == 4
    assert "Megatron's CUDA RNG fork left the CPU RNG state as it was" in saved


def test_megatron_extra_tensor_parallel_step_is_caught_at_the_call_only_rank0_made(tmp_path):
    """Rank 0 runs the script's `step()` once more: the collective that waits is inside
    `step` (a line every rank ran), the finding is at the `step()` call only rank 0 made, and
    names both lines and Megatron's frame."""
    pytest.importorskip("megatron.core")
    script = FIXTURES / "megatron_tp.py"
    assert_rank0_call_is_caught(script, tmp_path)
    proc = dry_run(script, "rank0", cwd=tmp_path)
    assert "(via megatron/core/tensor_parallel/" in proc.stdout
    assert "a call no other rank made" in proc.stdout


def test_megatron_pipeline_schedule_is_clean_on_fake_tensors(tmp_path):
    """Megatron-core's own 1F1B schedule at PP=4, written for GPUs: its batched p2p
    (isend/irecv of each stage's activations and gradients) recorded on fake tensors."""
    pytest.importorskip("megatron.core")
    saved = assert_clean_on_fake_tensors(FIXTURES / "megatron_pipeline.py", cwd=tmp_path, nproc=4)
    assert saved.count('"op": "isend"') == 8  # rank 0: one activation per microbatch
    assert '"via": "megatron/core/pipeline_parallel/p2p_communication.py:' in saved


def test_megatron_pipeline_deadlock_is_caught_at_the_users_line_and_megatrons(tmp_path):
    """Rank 0 runs one more microbatch than its peers: the schedule's sends meet head to head
    inside Megatron's p2p layer. The finding is at the user's call of the schedule and names
    Megatron's frame that made each call."""
    pytest.importorskip("megatron.core")
    script = FIXTURES / "megatron_pipeline.py"
    proc = dry_run(script, "rank0", cwd=tmp_path, nproc=4)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    line = next(
        i
        for i, text in enumerate(script.read_text().splitlines(), 1)
        if "losses = get_forward_backward_func()(" in text
    )
    assert f"{script}:{line}: CL201" in proc.stdout, proc.stdout
    assert "(via megatron/core/pipeline_parallel/p2p_communication.py:" in proc.stdout
