"""Start-up cost of `commlint check` (issue 12, "Layers"): seconds of imports, measured with
`python -X importtime` in fresh interpreters.

1. `commlint check --help` (builds every command's parser) and a real `commlint check` of a
   tiny file, without the cache and with it (pre-commit's usual run): the import seconds of
   everything commlint loads beyond a bare interpreter (`python -c pass`, the floor every
   Python command pays), and which of commlint's floors were loaded. Without the cache, LibCST
   (about 0.08 s) is the parser doing the work. Goal: <= 0.2 s of imports.
2. The peer, in the same process tree: the modules the old layering made `commlint check`
   import — the package root loading the checker and the plan importers, and the plan
   command loading networkx — imported explicitly next to the linter, so the ratio is what
   the one-way floors save.

Each figure is the best of N runs (the machine is shared).

    nice -n 10 python bench/startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 0.2
CHECK = ["-m", "commlint", "check"]
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
TINY = """import torch.distributed as dist


def step(x):
    if dist.get_rank() == 0:
        dist.all_reduce(x)
"""


def importtime(args: list[str], cwd: Path) -> tuple[float, float, set[str]]:
    """(seconds of top-level imports, wall seconds, modules imported) of one run."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True, cwd=cwd
    )
    wall = time.perf_counter() - t0
    total, names = 0, set()
    for line in done.stderr.splitlines():
        m = _LINE.match(line)
        if m:
            names.add(m.group(4))
            if len(m.group(3)) == 1:  # a top-level import: its cumulative time counts once
                total += int(m.group(2))
    return total / 1e6, wall, names


def best(args: list[str], cwd: Path, runs: int) -> tuple[float, float, set[str]]:
    results = [importtime(args, cwd) for _ in range(runs)]
    return min(r[0] for r in results), min(r[1] for r in results), results[0][2]


def floors(names: set[str]) -> str:
    parts = ["lint", "report", "graph", "plans", "commands"]
    loaded = [p for p in parts if any(n.startswith(f"commlint.{p}") for n in names)]
    extra = [n for n in ("networkx", "yaml", "libcst", "torch") if n in names]
    return f"commlint.{{{', '.join(loaded)}}} + {', '.join(extra) or 'nothing else'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "tiny.py").write_text(TINY)
        floor, floor_wall, _ = best(["-c", "pass"], cwd, args.runs)
        print(
            f"bare interpreter (python -c pass): {floor:.3f} s of imports, {floor_wall:.3f} s wall"
        )
        cases = {
            "commlint check --help": ["-m", "commlint", "check", "--help"],
            "commlint check tiny.py (no cache)": [*CHECK, "--no-cache", "tiny.py"],
            # pre-commit's usual run: the file's facts are cached, so neither LibCST nor the
            # extractor is loaded
            "commlint check tiny.py (cached)": [*CHECK, "tiny.py"],
        }
        subprocess.run([sys.executable, *CHECK, "tiny.py"], cwd=cwd, capture_output=True)
        old = (
            "import commlint.graph.check, commlint.plans.io, commlint.plans.replay, networkx\n"
            "from commlint.cli import main\nmain(['check', '--help'])"
        )
        peer, peer_wall, peer_names = best(["-c", old], cwd, args.runs)
        for label, argv in cases.items():
            t, wall, names = best(argv, cwd, args.runs)
            own = t - floor
            print(f"{label}:")
            print(
                f"  imports {t:.3f} s, {own:.3f} s beyond the bare interpreter   goal <= "
                f"{GOAL_S} s   ratio {own / GOAL_S:.2f}x   (wall {wall:.3f} s)"
            )
            print(f"  loaded: {floors(names)}")
        print("peer: `commlint check --help` with the old layering's imports (root → checker,")
        print("      plan importers; plan command → networkx):")
        print(
            f"  imports {peer:.3f} s, {peer - floor:.3f} s beyond the bare interpreter "
            f"(wall {peer_wall:.3f} s); loaded: {floors(peer_names)}"
        )
        t, _, _ = best(cases["commlint check --help"], cwd, args.runs)
        print(f"  the one-way floors save {(peer - t):.3f} s: {(peer - floor) / (t - floor):.1f}x")


if __name__ == "__main__":
    main()
