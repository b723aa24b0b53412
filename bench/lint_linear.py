"""Is every pass of `commlint check` linear in the file's size? (issue 29, item 7)

Two parts, each run in child processes of this one, beside peers run the same way:

1. Families of generated source (many functions, one long function of rank tests, a script,
   loops, a chain of helpers each calling the previous one, point-to-point pairs, try/finally,
   methods on `self.rank`) at n, 2n and 4n units: CPU seconds of the whole lint, the ratio to
   CPython's `ast.parse` of the same text, and the growth exponent of the CPU time against
   the size (1.0 = linear; above 1.3 is flagged).
2. A generated file just under the 2 MB limit, one CL101 per function: `commlint check
   --no-cache` end to end, against `ast.parse` and `ruff check --select ALL --no-cache` of the
   same file, with the goal (<= 10 s).

    python bench/lint_linear.py                     # both parts
    python bench/lint_linear.py --families chain,flat --base 300
    python bench/lint_linear.py --skip-families     # only the 2 MB file
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H = "import torch\nimport torch.distributed as dist\n"


def _functions(n: int) -> str:
    return H + "".join(
        f"\ndef step_{k}(x, rank):\n    y = x * {k}\n    if rank == {k % 4}:\n"
        f"        dist.all_reduce(y)\n    return y + {k}\n"
        for k in range(n)
    )


FAMILIES = {
    "many functions": _functions,
    "one function of rank tests": lambda n: (
        H
        + "\ndef step(y, rank):\n"
        + "".join(
            f"    y = y + {k}\n    if rank == {k % 4}:\n        dist.all_reduce(y)\n"
            for k in range(n)
        )
        + "    return y\n"
    ),
    "script (module level)": lambda n: (
        H
        + "rank = dist.get_rank()\ny = torch.zeros(1)\n"
        + "".join(f"y = y + {k}\nif rank == {k % 4}:\n    dist.all_reduce(y)\n" for k in range(n))
    ),
    "loops": lambda n: (
        H
        + "\ndef step(y, rank):\n"
        + "".join(
            f"    for i in range({k % 7}):\n        dist.all_reduce(y)\n"
            f"    while rank > {k % 3}:\n        dist.barrier()\n        break\n"
            for k in range(n)
        )
        + "    return y\n"
    ),
    "chain of helpers": lambda n: (
        H
        + "".join(
            f"\ndef f{k}(y, rank):\n    dist.all_reduce(y)\n"
            f"    return f{k - 1}(y, rank) if {k} else y\n"
            for k in range(n)
        )
        + f"\ndef main(rank):\n    if rank == 0:\n        f{n - 1}(1, rank)\n"
    ),
    "send/recv pairs": lambda n: (
        H
        + "\ndef step(y, rank):\n"
        + "".join(
            f"    if rank == {k % 2}:\n        dist.send(y, dst={1 - k % 2})\n"
            f"    else:\n        dist.recv(y, src={k % 2})\n"
            for k in range(n)
        )
        + "    return y\n"
    ),
    "try/finally": lambda n: (
        H
        + "\ndef step(y, rank):\n"
        + "".join(
            f"    try:\n        y = y + {k}\n    except RuntimeError:\n        dist.barrier()\n"
            f"    finally:\n        if rank != {k % 3}:\n            dist.all_reduce(y)\n"
            for k in range(n)
        )
        + "    return y\n"
    ),
    "methods on self.rank": lambda n: (
        H
        + "\nclass M:\n    def __init__(self):\n        self.rank = dist.get_rank()\n"
        + "".join(
            f"\n    def m{k}(self, y):\n        if self.rank == {k % 4}:\n"
            f"            dist.all_reduce(y)\n        return self.m{max(k - 1, 0)}(y)\n"
            for k in range(n)
        )
    ),
}


def child_cpu(command: list[str], cwd: Path | None = None) -> tuple[float, float, int, str]:
    """(CPU s of the child's process tree, wall s, exit code, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.returncode, proc.stdout


AST_CHILD = (
    "import ast,sys,time;s=open(sys.argv[1]).read();t=time.process_time();ast.parse(s);"
    "print(time.process_time()-t)"
)
LINT_CHILD = (
    "import sys,time;sys.setrecursionlimit(20000);t=time.process_time();"
    "from commlint.lint.config import LintConfig;from commlint.lint.engine import LintOptions,"
    "lint_paths;from pathlib import Path;p=Path(sys.argv[1]);"
    "r=lint_paths([str(p)],LintConfig(root=p.parent),LintOptions(cache=False,jobs=1));"
    "print(time.process_time()-t,len(r.findings))"
)


def families(names: list[str], base: int) -> None:
    print(
        f"{'family':28} {'n':>5} {'KB':>6} {'commlint cpu s':>14} {'ast.parse s':>11} "
        f"{'ratio':>6} {'findings':>8}"
    )
    for name, make in FAMILIES.items():
        if names and not any(w in name for w in names):
            continue
        rows = []
        for n in (base, 2 * base, 4 * base):
            folder = Path(tempfile.mkdtemp(prefix="commlint_linear_"))
            path = folder / "f.py"
            path.write_text(make(n), encoding="utf-8")
            out = child_cpu([sys.executable, "-c", LINT_CHILD, str(path)])[3].split()
            ours, found = (float(out[0]), int(out[1])) if len(out) == 2 else (float("nan"), -1)
            peer = float(child_cpu([sys.executable, "-c", AST_CHILD, str(path)])[3] or "nan")
            size = path.stat().st_size
            rows.append((size, ours))
            shutil.rmtree(folder, ignore_errors=True)
            print(
                f"{name:28} {n:>5} {size / 1e3:>6.0f} {ours:>14.2f} {peer:>11.3f} "
                f"{ours / max(peer, 1e-3):>5.0f}x {found:>8}",
                flush=True,
            )
            if ours > 120:
                break
        (s0, c0), (s1, c1) = rows[0], rows[-1]
        exponent = math.log(c1 / c0) / math.log(s1 / s0) if c0 > 0 and s1 > s0 else float("nan")
        flag = "  SUPER-LINEAR" if exponent > 1.3 else ""
        print(f"{name:28} growth exponent {exponent:.2f}{flag}", flush=True)


def two_mb() -> None:
    limit = 2_000_000
    n, text = 1000, ""
    while True:  # the largest number of functions under the limit
        candidate = _functions(n)
        if len(candidate.encode()) > limit:
            break
        text, n = candidate, int(n * 1.05) + 1
    folder = Path(tempfile.mkdtemp(prefix="commlint_2mb_"))
    path = folder / "gen2mb.py"
    path.write_text(text, encoding="utf-8")
    size = path.stat().st_size
    print(f"\n2 MB file: {size:,} bytes, {text.count('def '):,} functions")
    cmd = [sys.executable, "-m", "commlint", "check", "--no-cache", "-j", "1", "--format"]
    cpu, wall, code, out = child_cpu([*cmd, "json", str(path)], folder)
    findings = out.count('"code"')
    peer = float(child_cpu([sys.executable, "-c", AST_CHILD, str(path)])[3] or "nan")
    print(f"commlint check --no-cache: {cpu:.2f} s CPU, {wall:.2f} s wall, exit {code}")
    print(f"ast.parse (CPython, peer):  {peer:.2f} s CPU  -> commlint is {cpu / peer:.1f}x")
    ruff = shutil.which("ruff")
    if ruff:
        rcpu, _, _, _ = child_cpu(
            [ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero", "--quiet", str(path)]
        )
        print(f"ruff --select ALL (peer):   {rcpu:.2f} s CPU  -> commlint is {cpu / rcpu:.1f}x")
    verdict = "met" if cpu <= 10.0 else "NOT met"
    print(f"findings reported: {findings}; goal <= 10 s CPU: {verdict}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="", help="comma-separated substrings of names")
    ap.add_argument("--base", type=int, default=400, help="units of the smallest size")
    ap.add_argument("--skip-families", action="store_true")
    ap.add_argument("--skip-2mb", action="store_true")
    args = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if not args.skip_families:
        families([w for w in args.families.split(",") if w], args.base)
    if not args.skip_2mb:
        two_mb()


if __name__ == "__main__":
    main()
