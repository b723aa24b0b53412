"""How many framework programs need real compute under `commlint run` (issue 30, item 5).

Runs each program — the Lightning, HF Trainer and accelerate fixtures of
tests/dryrun/test_frameworks.py, accelerate's own shipped multi-process test scripts, and
DeepSpeed ZeRO-2 (`fixtures/deepspeed_zero.py`) when `deepspeed` can be imported —
with and without `ACCELERATE_USE_CPU=1`, 2 ranks, and prints per run: the exit code, whether
any rank was recorded with real tensors (the saved trace's `meta.tensors`), the verdict line,
and the time. Goal: 0 runs with real compute.

    nice -n 10 python bench/framework_real_compute.py
    nice -n 10 python bench/framework_real_compute.py --only accelerate --env cpu
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "dryrun" / "fixtures"


def programs() -> list[tuple[str, Path, list[str]]]:
    out = [
        ("lightning", FIXTURES / "lightning_ddp.py", []),
        ("lightning", FIXTURES / "lightning_ddp.py", ["fsdp"]),
        ("lightning", FIXTURES / "lightning_ddp.py", ["fsdp", "cpu"]),
        ("transformers", FIXTURES / "hf_trainer_ddp.py", []),
        ("accelerate", FIXTURES / "accelerate_train.py", []),
    ]
    if importlib.util.find_spec("deepspeed") is not None:  # e.g. on PYTHONPATH, --no-deps
        out.append(("deepspeed", FIXTURES / "deepspeed_zero.py", ["2"]))
    try:
        import accelerate.test_utils.scripts as scripts
    except ImportError:
        return out
    folder = Path(scripts.__file__).parent
    for name in ("test_sync", "test_script", "test_ddp_comm_hook", "test_ops",
                 "test_distributed_data_loop", "test_merge_weights"):  # fmt: skip
        out.append(("accelerate", folder / f"{name}.py", []))
    return out


def run_one(path: Path, args: list[str], env_cpu: bool) -> dict:
    env = dict(os.environ)
    env.pop("ACCELERATE_USE_CPU", None)
    if env_cpu:
        env["ACCELERATE_USE_CPU"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "commlint", "run", "--nproc-per-node", "2", "--timeout",
               "120", "--save-trace", f"{tmp}/trace", str(path), *args]  # fmt: skip
        start = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=1800)
        took = time.monotonic() - start
        tensors = "?"
        saved = Path(tmp) / "trace" / "rank-00000.yaml"
        if saved.exists():
            text = saved.read_text()
            tensors = "real" if '"tensors": "real"' in text else "fake"
    lines = done.stdout.strip().splitlines()
    return {
        "exit": done.returncode,
        "tensors": tensors,
        "verdict": lines[-1] if lines else done.stderr.strip().splitlines()[-1:],
        "seconds": round(took),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="lightning, transformers, accelerate or deepspeed")
    ap.add_argument("--env", choices=("both", "gpu", "cpu"), default="both")
    args = ap.parse_args()
    envs = {"both": (False, True), "gpu": (False,), "cpu": (True,)}[args.env]
    real = total = 0
    for framework, path, extra in programs():
        if args.only and framework != args.only:
            continue
        for env_cpu in envs:
            got = run_one(path, extra, env_cpu)
            total += 1
            real += got["tensors"] == "real"
            label = " ".join([path.name, *extra]) + (" ACCELERATE_USE_CPU=1" if env_cpu else "")
            print(json.dumps({"program": label, **got}), flush=True)
    print(f"real compute in {real} of {total} runs")
    return 0 if real == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
