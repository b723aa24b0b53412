"""A GPU-only script runs unchanged under the dry-run: the torch.cuda surface trainers use
(taken from torchtitan, accelerate, Lightning, transformers, megatron-core and deepspeed),
torch.accelerator, torch.compile (eager) and GradScaler, without falling back to real
tensors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from commlint.plans.dryrun import cuda_standins

SCRIPT = Path(__file__).parent / "fixtures" / "cuda_surface.py"


def run(*args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    """`commlint run` of `script` (its arguments, or commlint's before it) on 2 ranks."""
    flags = [a for a in args if a.startswith("--")]
    rest = [a for a in args if not a.startswith("--")]
    cmd = [sys.executable, "-m", "commlint", "run", "--nproc-per-node", "2", *flags]
    return subprocess.run(
        [*cmd, str(script), *rest],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_gpu_only_script_is_clean_under_fake_tensors_with_its_buckets_recorded(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commlint",
            "run",
            "--nproc-per-node",
            "2",
            "--save-trace",
            str(tmp_path),
            str(SCRIPT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All checks passed" in proc.stdout
    # the script's own asserts held (device class, properties, memory, accelerator) and it
    # printed what get_device_properties answered
    assert "commlint dry-run (no GPU), 80 GiB" in proc.stdout + proc.stderr
    # GradScaler's inf check was assumed, not computed: no real-tensor re-run
    assert "recorded again with small real CPU tensors" not in proc.stdout + proc.stderr
    saved = "\n".join(p.read_text() for p in tmp_path.rglob("*.yaml"))
    # the compiled DDP model's backward communicated through the bf16 compression hook
    assert '"op": "all_reduce", "async": true' in saved and '"dtype": "bfloat16"' in saved
    assert "GradScaler found no inf/NaN gradient" in saved  # meta.assumes says what it took


def test_rank0_only_collective_after_a_compiled_step_is_caught_at_its_line():
    proc = run("rank0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(
        i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "rank 0 only" in text
    )
    assert f"cuda_surface.py:{line}: CL203" in proc.stdout, proc.stdout


def test_standins_answer_like_a_gpu_node():
    """The stand-ins themselves, installed in a child interpreter (they patch torch)."""
    code = (
        "import torch\n"
        "from commlint.plans.dryrun import cuda_standins\n"
        "syncs = []\n"
        "cuda_standins.install(1, 4, syncs.append)\n"
        "d = torch.cuda.device('cuda:3')\n"
        "assert isinstance(d, torch.cuda.device) and d.idx == 3\n"
        "with torch.cuda.device(2) as e:\n"
        "    assert e.idx == 2\n"
        "assert torch.cuda.current_device() == 1\n"
        "torch.cuda.set_device(2)\n"
        "assert torch.accelerator.current_device_index() == 2\n"
        "assert torch.accelerator.device_count() == 4\n"
        "assert torch.cuda.get_device_properties().total_memory == 80 * 2**30\n"
        "assert torch.cuda.memory_stats()['allocated_bytes.all.peak'] == 0\n"
        "assert torch.equal(torch.cuda.get_rng_state(), torch.get_rng_state())\n"
        "assert len(torch.cuda.default_generators) == 4\n"
        "torch.cuda.nvtx.range_push('x'); torch.cuda.nvtx.range_pop()\n"
        "g = torch.cuda.CUDAGraph(); g.replay()\n"
        "assert torch.cuda.make_graphed_callables(abs, ()) is abs\n"
        "f = lambda x: x\n"
        "assert torch.compile(f) is f and torch.compile(mode='max-autotune')(f) is f\n"
        "m = torch.nn.Linear(2, 2); m.compile(); assert m(torch.ones(2)).shape == (2,)\n"
        "torch.accelerator.synchronize()\n"
        "assert syncs == ['accelerator.synchronize'], syncs\n"
        "import torch.distributed as dist\n"
        "assert torch.version.cuda and dist.is_nccl_available()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
    # the real torch is untouched in this process
    assert torch.compile is not cuda_standins.compile_eagerly


DEVICES = Path(__file__).parent / "fixtures" / "gpu_devices.py"


@pytest.mark.parametrize("tensors", ["fake", "real"])
def test_tensors_report_the_gpu_the_program_put_them_on(tensors):
    """Each tensor a GPU script moves to or makes on `cuda:N` says so (`.device`, `.is_cuda`,
    `.get_device()`), through a module's `.to`, its gradients and optimizer state and a deep
    copy; `.cpu()` and tensors made without a device say `cpu`. The script's own asserts of
    that pass, and a branch on `is_cuda` picks the same collective as on the GPUs."""
    proc = run(f"--tensors={tensors}", script=DEVICES)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "All checks passed" in proc.stdout


def test_a_branch_on_a_tensors_device_decides_what_a_rank_communicates():
    """Rank 1 moves its tensor back to the CPU and skips the all-reduce rank 0 makes."""
    proc = run("cpu_rank1", script=DEVICES)
    line = next(
        i
        for i, text in enumerate(DEVICES.read_text().splitlines(), 1)
        if "dist.all_reduce(stats)" in text
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert f"gpu_devices.py:{line}: CL202" in proc.stdout, proc.stdout
