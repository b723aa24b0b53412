"""A GPU-only script runs unchanged under the dry-run: the torch.cuda surface trainers use
(taken from torchtitan, accelerate, Lightning, transformers, megatron-core and deepspeed),
torch.accelerator, torch.compile (eager) and GradScaler, without falling back to real
tensors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_server import run_commlint

from commlint.plans.dryrun import cuda_standins

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = FIXTURES / "cuda_surface.py"


def run(*args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    """`commlint run` of `script` (its arguments, or commlint's before it) on 2 ranks."""
    flags = [a for a in args if a.startswith("--")]
    rest = [a for a in args if not a.startswith("--")]
    cmd = ["run", "--nproc-per-node", "2", *flags]
    return run_commlint([*cmd, str(script), *rest], timeout=300)


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


PATHS = Path(__file__).parent / "fixtures" / "gpu_paths.py"


@pytest.mark.parametrize(
    ("part", "recorded"),
    [
        # each SyncBatchNorm layer: its (2C+1) statistics gathered in the forward, its 2C
        # gradient sums all-reduced in the backward
        ("syncbn", ['"op": "all_gather", "shape": [9]', '"op": "all_reduce", "shape": [8]']),
        # sync_module_states' broadcast, then the flat parameter's gather and scatter
        ("fsdp1", ['"op": "broadcast"', '"op": "all_gather"', '"op": "reduce_scatter"']),
        ("dtensor", ['"op": "all_to_all"']),
        ("attention", ['"op": "scatter"']),
    ],
)
def test_torchs_gpu_only_paths_run_and_communicate_as_on_gpus(part, recorded, tmp_path):
    proc = run(f"--save-trace={tmp_path}", part, script=PATHS)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    saved = (tmp_path / "rank-00000.yaml").read_text()
    for text in recorded:
        assert text in saved, saved[-3000:]
    if part == "dtensor":  # no all-gather fallback of a CPU mesh
        assert '"op": "all_gather"' not in saved
    if part == "attention":  # heads sharded: nothing gathered, nothing computed for real
        assert '"op": "all_gather"' not in saved and '"tensors": "fake"' in saved


@pytest.mark.parametrize("tensors", ["fake", "real"])
def test_gpu_buffers_made_in_backward_and_recorded_streams_stay_on_the_cpu(tensors, tmp_path):
    """A gradient hook and a custom autograd function's backward run inside `backward()`,
    where the buffers they make on the GPU must stay on the CPU too; `record_stream` takes
    the stand-in stream."""
    proc = run(f"--save-trace={tmp_path}", f"--tensors={tensors}", "hooks", script=PATHS)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    saved = (tmp_path / "rank-00000.yaml").read_text()
    assert saved.count('"op": "all_reduce"') == 2, saved
    # on fake tensors throughout: a device index in a custom backward (Megatron's) once
    # stopped them, and the real re-run hid it
    assert f'"tensors": "{tensors}"' in saved and "stopped under fake" not in proc.stderr


def test_a_checkpoint_of_fake_tensors_saves_and_loads_onto_the_gpu(tmp_path):
    """Past the budget (nothing computed), rank 0's `torch.save` of fake tensors writes their
    shapes and every rank's `torch.load(map_location="cuda:N")` gives them back on its GPU."""
    proc = run("--real-budget=0", "checkpoint", str(tmp_path), script=PATHS)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "All checks passed" in proc.stdout


def test_sync_batch_norm_forward_on_one_rank_is_caught():
    proc = run("syncbn_eval_rank0", script=PATHS)
    line = next(
        i for i, text in enumerate(PATHS.read_text().splitlines(), 1) if "forgotten" in text
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert f"gpu_paths.py:{line}: CL202" in proc.stdout, proc.stdout
    assert "all_gather(WORLD)" in proc.stdout


def test_sync_batch_norm_kernels_give_the_whole_batchs_statistics():
    """The CPU kernels the dry-run gives SyncBatchNorm's CUDA-only operators, over a batch
    split between two "ranks", equal batch norm over the whole batch: output, running
    statistics, and input/weight/bias gradients."""
    code = """
import torch
import torch.nn.functional as F
from commlint.plans.dryrun import gpu_paths
gpu_paths.register_sync_batch_norm_kernels()
torch.manual_seed(0)
x = torch.randn(6, 4, 5, 5, dtype=torch.float64, requires_grad=True)
w = torch.randn(4, dtype=torch.float64, requires_grad=True)
b = torch.randn(4, dtype=torch.float64, requires_grad=True)
rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
ref = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
dy = torch.randn_like(ref)
ref.backward(dy)
parts, grads = (x.detach()[:2], x.detach()[2:]), (dy[:2], dy[2:])
stats = [torch.batch_norm_stats(p, 1e-5) for p in parts]
counts = torch.tensor([p.numel() // 4 for p in parts], dtype=torch.float64)
rm2, rv2 = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
mean, invstd = torch.batch_norm_gather_stats_with_counts(
    x, torch.stack([s[0] for s in stats]), torch.stack([s[1] for s in stats]),
    rm2, rv2, 0.1, 1e-5, counts)
out = torch.cat([torch.batch_norm_elemt(p, w, b, mean, invstd, 1e-5) for p in parts])
assert torch.allclose(out, ref) and torch.allclose(rm2, rm) and torch.allclose(rv2, rv)
reduced = [torch.batch_norm_backward_reduce(g, p, mean, invstd, w, True, True, True)
           for g, p in zip(grads, parts)]
sum_dy = sum(r[0] for r in reduced)
sum_dy_xmu = sum(r[1] for r in reduced)
assert torch.allclose(sum(r[2] for r in reduced), w.grad)
assert torch.allclose(sum(r[3] for r in reduced), b.grad)
dx = torch.cat([
    torch.batch_norm_backward_elemt(g, p, mean, invstd, w, sum_dy, sum_dy_xmu,
                                    counts.to(torch.int32))
    for g, p in zip(grads, parts)])
assert torch.allclose(dx, x.grad), (dx - x.grad).abs().max()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


SPAWNED = Path(__file__).parent / "fixtures" / "spawned.py"


def test_a_script_that_spawns_its_own_workers_is_recorded_worker_by_worker():
    """`mp.spawn(main, nprocs=torch.cuda.device_count())` (the DDP tutorials): each simulated
    rank is one worker and runs `main(rank, ...)` itself."""
    proc = run(script=SPAWNED)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    proc = run("rank0", script=SPAWNED)
    line = next(
        i for i, text in enumerate(SPAWNED.read_text().splitlines(), 1) if "worker 0 only" in text
    )
    assert proc.returncode == 1 and f"spawned.py:{line}: CL20" in proc.stdout, proc.stdout


@pytest.mark.parametrize("case", ["forgotten", "gloo_group", "both", "default", "mesh_device"])
def test_a_cpu_tensor_given_to_an_nccl_only_group_raises_as_on_the_gpus(case):
    """The GPUs raise "No backend type associated with device type cpu" where the program
    gives an NCCL-only group a CPU tensor (a crash at the first step of the real job); a gloo
    group, or a default group with both backends (named, or no backend named), takes it."""
    script = FIXTURES / "nccl_cpu_tensor.py"
    proc = run(case, script=script)
    if case == "forgotten":
        line = next(
            i for i, text in enumerate(script.read_text().splitlines(), 1) if "on NCCL" in text
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
        assert (
            f"{script.name}:{line}: every rank raised RuntimeError: No backend type associated "
            "with device type cpu: all_reduce of a CPU tensor on a group whose only backend is "
            "NCCL"
        ) in proc.stderr
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "All checks passed" in proc.stdout


@pytest.mark.parametrize(
    ("mode", "ops"),
    [
        ("init", ["scatter", "broadcast", "barrier"]),  # nn.init (skipped) still syncs
        ("dropout", ["scatter", "broadcast", "barrier"]),
        ("seeded", ["scatter", "barrier"]),  # manual_seed(seed, mesh): a tracker, no sync
    ],
)
def test_dtensors_first_random_op_on_a_gpu_mesh_syncs_rng_state_as_on_gpus(mode, ops, tmp_path):
    """The broadcast of rank 0's RNG state DTensor's tracker makes on GPUs (a "cpu" mesh
    here, where DTensor makes none) is in the trace, on the default group, from rank 0."""
    proc = run(f"--save-trace={tmp_path}", mode, script=FIXTURES / "dtensor_rng.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        saved = (tmp_path / f"rank-0000{rank}.yaml").read_text()
        assert re.findall(r'"op": "(\w+)"', saved) == ops
    if "broadcast" in ops:
        assert '"op": "broadcast", "root": 0, "shape": [16], "dtype": "uint8"' in saved


def test_a_dtensor_random_init_on_one_rank_only_is_caught_at_its_line():
    script = FIXTURES / "dtensor_rng.py"
    proc = run("rank0", script=script)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(
        i for i, text in enumerate(script.read_text().splitlines(), 1) if "# rank 0 only" in text
    )
    assert f"{script.name}:{line}: CL203" in proc.stdout, proc.stdout
