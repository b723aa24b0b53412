"""Benchmark `commlint check` on real distributed-training code, side by side with TorchFix.

    nice -n 10 python bench/lint.py                 # everything (TorchFix takes minutes)
    python bench/lint.py --packages accelerate      # one package, quicker
    python bench/lint.py --skip-torchfix            # commlint only (cold and cached)

Downloads (once, `pip download --no-deps`, into bench/_work/, git-ignored) the pinned
releases of megatron-core, deepspeed, torchtitan, accelerate, Lightning and transformers (the
newest for Python 3.11 when pinned; none pulls torch: nothing is installed), unpacks them,
and lints every `.py` file of them:

- commlint cold: an empty cache directory; commlint cached: the same run again;
- TorchFix (`torchfix --select ALL`, in its own virtualenv because it pins an older libcst),
  on the same files, from this same process tree;
- ruff (`ruff check --select ALL --no-cache --exit-zero`, the ruff of this environment): the
  speed users compare a linter with, on the same files.

Prints files, wall time, files/s and CPU time (of the whole process tree, the fair figure
on a shared machine) per run, and the ratios against the goals (commlint cold no slower than
TorchFix; cached at least 10x faster than TorchFix; megatron-core + deepspeed cold within
20 s wall, `--packages megatron-core,deepspeed`). A crash (internal error,
traceback, exit code other than 0/1) on any file fails the benchmark with exit code 1. The
findings of the cold run are kept in bench/_work/findings.json for docs/real-world.md, each
run's stderr in bench/_work/TOOL-MODE.stderr; the errors and warnings per package are
printed, then every error as `package: file:line CODE` (the list docs/real-world.md judges).
`--head` benchmarks the committed code (useful while the work tree is being edited).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "_work"
DOWNLOADS = WORK / "dl"
SOURCES = WORK / "src"
TORCHFIX_VENV = WORK / "torchfix-venv"
CACHE = WORK / "commlint-cache"
SNAPSHOT = WORK / "commlint-head"
FINDINGS = WORK / "findings.json"

# Pinned so that the figures and docs/real-world.md can be reproduced.
PACKAGES = {
    "megatron-core": "megatron-core==0.16.1",
    "deepspeed": "deepspeed==0.19.8",
    "torchtitan": "torchtitan==0.3.0",
    "accelerate": "accelerate==1.15.0",
    "lightning": "lightning==2.6.6",
    "transformers": "transformers==5.24.0",
}
TORCHFIX = "torchfix==0.7.0"


@dataclass
class Run:
    tool: str
    mode: str
    files: int
    seconds: float
    cpu: float
    exit_code: int
    crashed: str = ""

    @property
    def rate(self) -> float:
        return self.files / self.seconds if self.seconds else float("inf")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _archive_for(requirement: str) -> Path | None:
    name = requirement.split("==")[0].replace("-", "_").lower()
    version = requirement.split("==")[1]
    for path in DOWNLOADS.glob("*"):
        stem = path.name.lower().replace("-", "_")
        if stem.startswith(f"{name}_{version}") and path.suffix in (".whl", ".gz", ".zip"):
            return path
    return None


def download(packages: list[str]) -> dict[str, Path]:
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    archives = {}
    missing = [p for p in packages if _archive_for(PACKAGES[p]) is None]
    if missing:
        log(f"downloading {', '.join(PACKAGES[p] for p in missing)} ...")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(DOWNLOADS)]
            + [PACKAGES[p] for p in missing],
            check=True,
        )
    for package in packages:
        archive = _archive_for(PACKAGES[package])
        if archive is None:
            raise SystemExit(f"bench: pip download gave no archive for {PACKAGES[package]}")
        archives[package] = archive
    return archives


def unpack(package: str, archive: Path) -> Path:
    target = SOURCES / package
    marker = target / ".unpacked"
    if marker.exists() and marker.read_text() == archive.name:
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(target)
    else:
        with tarfile.open(archive) as tf:
            tf.extractall(target, filter="data")
    marker.write_text(archive.name)
    return target


def python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if p.is_file())


def torchfix_executable() -> Path:
    exe = TORCHFIX_VENV / "bin" / "torchfix"
    if not exe.exists():
        log(f"installing {TORCHFIX} into {TORCHFIX_VENV.relative_to(ROOT)} ...")
        subprocess.run([sys.executable, "-m", "venv", str(TORCHFIX_VENV)], check=True)
        subprocess.run(
            [str(TORCHFIX_VENV / "bin" / "pip"), "install", "--quiet", TORCHFIX], check=True
        )
    return exe


def crash_in(stderr: str) -> str:
    for marker in ("Traceback (most recent call last)", "internal error"):
        if marker in stderr:
            start = stderr.index(marker)
            return stderr[start : start + 400]
    return ""


def head_snapshot() -> Path:
    """The committed commlint (git HEAD), exported: edits in the work tree during a long run
    would change the code (and the cache key) between the cold and the cached run."""
    shutil.rmtree(SNAPSHOT, ignore_errors=True)
    SNAPSHOT.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD", "commlint"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(SNAPSHOT)], input=archive, check=True)
    return SNAPSHOT


def timed(
    tool: str,
    mode: str,
    command: list[str],
    n_files: int,
    ok_codes: set[int],
    env: dict[str, str] | None = None,
) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=WORK, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time of the whole process tree: the fair figure on a shared, loaded machine.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    (WORK / f"{tool}-{mode}.stderr").write_text(proc.stderr, encoding="utf-8")
    crashed = crash_in(proc.stderr)
    if proc.returncode not in ok_codes and not crashed:
        crashed = f"exit code {proc.returncode}: {proc.stderr.strip()[-400:]}"
    return Run(tool, mode, n_files, seconds, cpu, proc.returncode, crashed)


def commlint_command(folders: list[Path], jobs: int, output: Path) -> list[str]:
    """The packages' folders, as a user checks a project (files named one by one would be
    checked as a pre-commit change, with the rest of the project as context)."""
    return [
        sys.executable,
        "-m",
        "commlint",
        "check",
        "--cache-dir",
        str(CACHE),
        "-j",
        str(jobs),
        "--format",
        "json",
        "--output-file",
        str(output),
        *map(str, folders),
    ]


def _report_readable(output: Path) -> bool:
    try:
        json.loads(output.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def report_findings(output: Path) -> dict:
    data = json.loads(output.read_text(encoding="utf-8"))
    return data


def package_of(path: str) -> str:
    """`src/<package>/...` (relative to bench/_work) -> the package's name."""
    parts = Path(path).parts
    return parts[1] if len(parts) > 2 and parts[0] == "src" else "?"


def print_per_package(findings: dict, packages: list[str]) -> None:
    """Errors and warnings per package, then every error (file:line code), the list
    docs/real-world.md judges one by one."""
    counts = {p: [0, 0] for p in packages}
    errors = []
    for f in findings["findings"]:
        package = package_of(f["path"])
        slot = counts.setdefault(package, [0, 0])
        if f["severity"] == "error":
            slot[0] += 1
            errors.append((package, f["path"], f["line"], f["code"]))
        else:
            slot[1] += 1
    print(f"{'package':<14} {'errors':>6} {'warnings':>8}")
    for package, (n_errors, n_warnings) in counts.items():
        print(f"{package:<14} {n_errors:>6} {n_warnings:>8}")
    for package, path, line, code in sorted(errors):
        inner = Path(path).relative_to(Path("src") / package)
        print(f"  error {package}: {inner}:{line} {code}")


def print_table(runs: list[Run], baseline: Run | None) -> None:
    print(
        f"{'tool':<9} {'mode':<7} {'files':>6} {'wall s':>8} {'files/s':>8} {'cpu s':>8} "
        f"{'wall vs TorchFix':>17} {'cpu vs TorchFix':>16}"
    )
    for run in runs:
        wall = cpu = ""
        if baseline and run.seconds and run.cpu:
            wall = f"{baseline.seconds / run.seconds:.1f}x"
            cpu = f"{baseline.cpu / run.cpu:.1f}x"
        print(
            f"{run.tool:<9} {run.mode:<7} {run.files:>6} {run.seconds:>8.2f} {run.rate:>8.1f} "
            f"{run.cpu:>8.2f} {wall:>17} {cpu:>16}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--packages",
        default=",".join(PACKAGES),
        help=f"comma-separated subset of {', '.join(PACKAGES)}",
    )
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-torchfix", action="store_true", help="do not time TorchFix")
    parser.add_argument("--skip-ruff", action="store_true", help="do not time ruff")
    parser.add_argument("--no-nice", action="store_true", help="do not lower our priority")
    parser.add_argument(
        "--head",
        action="store_true",
        help="run the commlint of git HEAD (exported to bench/_work), not the work tree's",
    )
    args = parser.parse_args(argv)
    packages = [p.strip() for p in args.packages.split(",") if p.strip()]
    unknown = [p for p in packages if p not in PACKAGES]
    if unknown:
        parser.error(f"unknown package(s): {', '.join(unknown)}")
    if not args.no_nice:
        os.nice(10)  # the machine is shared

    files: list[Path] = []
    folders: list[Path] = []
    for package, archive in download(packages).items():
        folder = unpack(package, archive)
        folders.append(folder.relative_to(WORK))
        found = python_files(folder)
        log(f"{package}: {archive.name}, {len(found)} .py files")
        files.extend(found)
    rel_files = [f.relative_to(WORK) for f in files]

    shutil.rmtree(CACHE, ignore_errors=True)
    runs = []
    env = None
    if args.head:
        env = dict(os.environ, PYTHONPATH=str(head_snapshot()))
        log(f"commlint from git HEAD, exported to {SNAPSHOT.relative_to(ROOT)}")
    cached_out = WORK / "findings-cached.json"
    for stale in (FINDINGS, cached_out):
        stale.unlink(missing_ok=True)
    for mode, output in (("cold", FINDINGS), ("cached", cached_out)):
        log(f"commlint {mode} on {len(files)} files (-j {args.jobs}) ...")
        command = commlint_command(folders, args.jobs, output)
        run = timed("commlint", mode, command, len(files), {0, 1}, env)
        if not run.crashed and not _report_readable(output):
            # exit 1 is also what `python -m commlint` gives when commlint cannot be imported:
            # a run counts only with the report it was asked to write
            run.crashed = f"exit code {run.exit_code}, no JSON report written to {output.name}"
        runs.append(run)
        log(f"  {runs[-1].seconds:.1f} s wall, {runs[-1].cpu:.1f} s CPU, exit {runs[-1].exit_code}")
    baseline = None
    if not args.skip_torchfix:
        exe = torchfix_executable()
        log(f"torchfix --select ALL on the same files (-j {args.jobs}) ...")
        baseline = timed(
            "torchfix",
            "cold",
            [str(exe), "--select", "ALL", "-j", str(args.jobs), *map(str, rel_files)],
            len(files),
            {0, 1},
        )
        runs.append(baseline)
        log(f"  {baseline.seconds:.1f} s wall, {baseline.cpu:.1f} s CPU")

    ruff = shutil.which("ruff")
    if not args.skip_ruff and ruff:
        log("ruff check --select ALL on the same files ...")
        command = [ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet"]
        runs.append(timed("ruff", "cold", command + list(map(str, rel_files)), len(files), {0}))
        log(f"  {runs[-1].seconds:.1f} s wall, {runs[-1].cpu:.1f} s CPU")

    print()
    print(f"packages: {', '.join(PACKAGES[p] for p in packages)}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall time is shared)")
    print_table(runs, baseline)
    cold_run = runs[0]
    for peer in runs[2:]:
        if peer.seconds and not peer.crashed:
            print(
                f"commlint cold / {peer.tool}: {cold_run.seconds / peer.seconds:.2f}x the wall "
                f"time, {cold_run.cpu / peer.cpu if peer.cpu else float('inf'):.2f}x the CPU time"
            )
    if set(packages) == {"megatron-core", "deepspeed"}:
        verdict = "met" if cold_run.seconds <= 20.0 and not cold_run.crashed else "NOT met"
        print(f"cold wall time {cold_run.seconds:.1f} s (goal <= 20 s on 2 cores: {verdict})")
    failed = [run for run in runs if run.crashed]
    for run in failed:
        print(f"CRASH {run.tool} {run.mode}: {run.crashed}")

    if FINDINGS.exists() and not runs[0].crashed:
        cold = report_findings(FINDINGS)
        cached = report_findings(cached_out) if cached_out.exists() else None
        summary = cold["summary"]
        print(
            f"commlint findings: {summary['findings']} ({summary['errors']} errors, "
            f"{summary['warnings']} warnings), input errors: {summary['input_errors']}; "
            f"by code: {summary['by_code']}"
        )
        print_per_package(cold, packages)
        if cached is not None and cached["findings"] != cold["findings"]:
            print("MISMATCH: the cached run reported different findings than the cold run")
            failed.append(runs[1])

    if baseline and not baseline.crashed:
        for label, run, goal in (("cold", runs[0], 1.0), ("cached", runs[1], 10.0)):
            wall = baseline.seconds / run.seconds
            cpu = baseline.cpu / run.cpu if run.cpu else float("inf")
            verdict = "met" if min(wall, cpu) >= goal else "NOT met"
            print(
                f"{label + ':':<8} commlint is {wall:.2f}x TorchFix's speed in wall time, "
                f"{cpu:.2f}x in CPU time (goal >= {goal:g}x: {verdict})"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
