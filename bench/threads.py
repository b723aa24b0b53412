"""The same verdict every run for a rank whose worker thread communicates on a side group.

Runs `commlint run` on `tests/dryrun/fixtures/side_group_thread.py` (a worker thread
all-reduces on a side group while the main thread all-reduces on WORLD; which thread issues
first is a race) N times and counts the verdicts (exit code and last line) and internal errors.
Goal (issue 30, item 6): one verdict, exit 0, in 20 of 20 runs.

    nice -n 10 python bench/threads.py            # 20 runs at 2 ranks
    nice -n 10 python bench/threads.py --runs 5 --nproc 4
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "dryrun" / "fixtures" / "side_group_thread.py"
INTERNAL = ("Traceback", "UnpicklingError", "UnicodeDecodeError", "internal error")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    verdicts: collections.Counter[tuple[int, str]] = collections.Counter()
    internal = 0
    start = time.monotonic()
    for _ in range(args.runs):
        cmd = [sys.executable, "-m", "commlint", "run", "--nproc-per-node", str(args.nproc)]
        done = subprocess.run([*cmd, str(PROGRAM)], capture_output=True, text=True, timeout=600)
        out = (done.stdout + done.stderr).strip()
        internal += any(word in out for word in INTERNAL)
        verdicts[(done.returncode, out.splitlines()[-1] if out else "")] += 1
    took = time.monotonic() - start
    for (code, line), n in verdicts.most_common():
        print(f"{n:3d} × exit {code}: {line}")
    print(f"{args.runs} runs in {took:.0f} s; internal errors in {internal}")
    ok = len(verdicts) == 1 and next(iter(verdicts))[0] == 0 and not internal
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
