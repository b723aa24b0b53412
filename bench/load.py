"""`commlint plan` of a large JSON plan, end to end (load + check + report): actions/s and
peak RSS, against the previous loader as a peer in the same run (issue 12).

The plan: RANKS ranks × PER_RANK all-reduces alternating between TP groups of 8 and DP
groups of RANKS/8. Each run is a child process; its peak RSS is its own `os.wait4` rusage.
Peers: `previous` is the loader before the compact store (json.loads, then yaml.compose of the
whole file for line numbers, then one pydantic object per action), taken from git history;
`json.loads` is the floor of any loader built on the standard parser; `check only` is the
checker on the trace already in memory (its peak includes the load); `before` is the whole
`commlint plan` of an earlier commit (`--before REV`, default: main before the input gate of
issue 32), extracted with `git archive` and run from bytecode like the current one, so the
gate's cost is a ratio measured in this run.

    python bench/load.py                     # 256 ranks × 1,024 = 262,144 actions
    python bench/load.py --ranks 1024        # the issue's 1,048,576 actions (previous: minutes)
    python bench/load.py --ranks 1024 --no-previous
    python bench/load.py --before 5468e90    # another "before"; --before none: no such peer
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a `before` child runs the commlint extracted from an earlier commit (bench/revision.py)
sys.path.insert(0, os.environ.get("COMMLINT_BENCH_TREE", str(ROOT)))
sys.path.insert(0, str(ROOT / "bench"))

# the loader before the compact store and lazy line numbers (commit ccf81a2)
PREVIOUS = "ccf81a2"
# main before the input gate, the size limits and the isolated parsing of issue 32
BEFORE = "c48773c"


def _previous_io() -> types.ModuleType:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{PREVIOUS}:commlint/plans/io.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("commlint_previous_io")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{PREVIOUS}:commlint/plans/io.py", "exec"), module.__dict__)
    return module


def child(mode: str, path: str) -> None:
    """One measured run; prints `wall_seconds cpu_seconds` (after imports) on stdout."""
    if mode == "json.loads":
        start, cpu = time.perf_counter(), time.process_time()
        json.loads(Path(path).read_text())
        print(time.perf_counter() - start, time.process_time() - cpu)
        return
    if mode == "check only":  # the checker on the trace in memory: what loading adds to
        from commlint.graph.check import check_trace
        from commlint.plans.io import load_trace

        loaded = load_trace(path)
        start, cpu = time.perf_counter(), time.process_time()
        check_trace(loaded.trace, None, path, loaded.lines)
        print(time.perf_counter() - start, time.process_time() - cpu)
        return
    from commlint.cli import main

    if mode == "previous":
        import commlint.plans.io as current

        old_load = _previous_io().load_trace

        def load_trace(path, allow_paths=()):  # the gate's `--allow-path` did not exist then
            return old_load(path)

        current.load_trace = load_trace  # what `commlint plan` calls
    # imports outside the measured time
    import commlint.commands.plan
    import commlint.graph.check  # noqa: F401

    out = io.StringIO()
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):
        code = main(["plan", path])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert code == 0, out.getvalue()[-500:]
    print(elapsed, cpu)


def measure(mode: str, path: Path, tree: Path | None = None) -> tuple[float, float, float]:
    """(wall and CPU seconds of load + check + report, peak RSS MB) of one child run;
    `tree`: the folder holding an earlier commit's `commlint/` for the child to import."""
    env = dict(os.environ)
    if tree is not None:
        env["COMMLINT_BENCH_TREE"] = str(tree)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", "before" if tree else mode, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{mode} failed")
    wall, cpu = map(float, out.strip().splitlines()[-1].split())
    return wall, cpu, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--per-rank", type=int, default=1024)
    parser.add_argument("--no-previous", action="store_true", help="skip the slow peer")
    parser.add_argument(
        "--before", default=BEFORE, help="commit whose `commlint plan` is the before peer"
    )
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from limits_plans import write_json_plan

    n = args.ranks * args.per_rank
    with tempfile.TemporaryDirectory() as tmp:
        path = write_json_plan(Path(tmp) / "plan.json", args.ranks, args.per_rank)
        size = path.stat().st_size / 1e6
        print(
            f"plan: {args.ranks} ranks × {args.per_rank} all-reduces = {n:,} actions, {size:.0f} MB"
        )
        modes = ["json.loads", "check only", "current"]
        modes += [] if args.no_previous else ["previous"]
        results = {m: measure(m, path) for m in modes}
        if args.before != "none":
            from revision import describe, tree

            print(f"before: {describe(args.before)}")
            with tree(args.before) as folder:
                results["before"] = measure("before", path, folder)
        _, cur_cpu, cur_m = results["current"]
        print(f"{'':12} {'wall s':>8} {'CPU s':>8} {'actions/CPU s':>14} {'peak MB':>8}")
        for m, (wall, cpu, rss) in results.items():
            rate = f"{n / cpu:>14,.0f}" if m != "json.loads" else " " * 14
            versus = (
                f"   peer/current: CPU ×{cpu / cur_cpu:.2f}, memory ×{rss / cur_m:.2f}"
                if m != "current"
                else ""
            )
            print(f"{m:12} {wall:8.2f} {cpu:8.2f} {rate} {rss:8.0f}{versus}")


if __name__ == "__main__":
    main()
