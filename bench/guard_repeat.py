"""The same hang, N times under the guard: how soon the verdict comes and whether it is the same.

    python bench/guard_repeat.py [--runs 10] [--timeout 2] [--cases lazy,mesh,cycle,order,stall]

Cases (real gloo jobs, `tests/guard/programs/`):
- `lazy`: a group created on rank 0 only, then one on every rank (group creation, CL212);
- `mesh`: a 2-D device mesh on rank 0, a 1-D one on rank 1 (CL212);
- `cycle`: send/send between two ranks (CL201); `order`: all-reduces on two groups in opposite
  orders (CL201);
- `stall`: rank 1 sleeps outside communication while rank 0 waits: a state report naming rank
  1's line, after the timeout (no verdict; the job ends as unguarded);
- `eval_subgroup_setup`: the realistic corpus's 4-rank lazy evaluation group (CL212).
For each run: the time to the verdict as a multiple of the guard's timeout — for a checked
hang the guard's own "hang diagnosed N s after the first call blocked"; for a fingerprint
verdict (raised before the call) the time from the last rank reaching the call (the program
prints it) to the verdict's first line on the job's stderr; for a stall the first report's
"N s since the first call blocked" — and the verdict itself with times left out. A case
passes when every run's time is within 4x the timeout and every run's verdict is the same.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

try:
    from bench.guard_jobs import ROOT, command, job_env
except ImportError:  # run as a script: bench/ itself is on sys.path
    from guard_jobs import ROOT, command, job_env

PROGRAMS = ROOT / "tests" / "guard" / "programs"
REALISTIC = ROOT.parent / "shared" / "corpus" / "realistic" / "cases"
_SECONDS = re.compile(r"\d+(\.\d+)? s\b")
_AFTER = re.compile(r"hang diagnosed ([0-9.]+) s after")
_SINCE = re.compile(r"\(([0-9.]+) s since the first call blocked\)")


def case_job(case: str, timeout: float) -> tuple[list[str], Path, dict[str, str]]:
    guard = ["--timeout", str(timeout)]
    if case in ("lazy", "mesh"):
        return command(PROGRAMS / "group_setup.py", [case], guard=guard), ROOT, job_env()
    if case in ("cycle", "order"):
        return command(PROGRAMS / "guarded.py", [case], guard=guard), ROOT, job_env()
    if case == "stall":
        cmd = command(PROGRAMS / "stall.py", [str(3 * timeout)], guard=guard)
        return cmd, ROOT, job_env()
    folder = REALISTIC / case
    env = job_env(CASE_TIMEOUT_S="30")
    return command("main.py", [], guard=guard, nproc=4), folder, env


def verdict(stderr: str) -> tuple[str, ...]:
    """The verdict's lines (codes, per-rank calls and sites), times left out, each once."""
    keep = []
    for line in stderr.splitlines():
        text = line.strip()
        code = re.search(r"\bCL\d{3}\b", text)
        if "stops:" in text:  # "rank 1 stops: rank 0 diagnosed ..." — who printed it
            continue
        if code:  # the headline, whether raised (`CommlintGuardError: ...`) or printed
            keep.append(_SECONDS.sub("<s>", text[code.start() :]))
        elif re.match(r"rank \d+: ", text):
            keep.append(_SECONDS.sub("<s>", text))
    return tuple(sorted(set(keep)))


def run_once(case: str, timeout: float) -> dict:
    cmd, cwd, env = case_job(case, timeout)
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    verdict_at = None  # when the first line of a verdict reached us
    for line in proc.stderr:  # type: ignore[union-attr]
        lines.append(line)
        if verdict_at is None and re.search(r"\bCL\d{3}\b", line):
            verdict_at = time.time()
    proc.wait(timeout=300)
    err = "".join(lines)
    after = [float(x) for x in _AFTER.findall(err)]
    since = [float(x) for x in _SINCE.findall(err)]
    stamps = [float(ln.rsplit(" ", 1)[1]) for ln in err.splitlines() if " creating at " in ln]
    if after:
        seconds = max(after)
    elif case == "stall":
        seconds = since[0] if since else None
    elif stamps and verdict_at is not None:
        seconds = verdict_at - max(stamps)
    else:
        seconds = None
    return {"rc": proc.returncode, "seconds": seconds, "verdict": verdict(err), "tail": err[-2000:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--cases", default="lazy,mesh,cycle,order,stall")
    args = ap.parse_args(argv)
    ok = True
    for case in args.cases.split(","):
        runs = []
        for i in range(args.runs):
            r = run_once(case, args.timeout)
            runs.append(r)
            s = r["seconds"]
            print(
                f"{case:20} run {i + 1:2}: rc={r['rc']} "
                + (f"{s:5.1f} s = {s / args.timeout:.2f}x timeout" if s is not None else "no time"),
                flush=True,
            )
        verdicts = {r["verdict"] for r in runs}
        times = [r["seconds"] for r in runs if r["seconds"] is not None]
        within = len(times) == len(runs) and all(t <= 4 * args.timeout for t in times)
        same = len(verdicts) == 1 and runs[0]["verdict"] != ()
        ok &= within and same
        span = f"{min(times):.1f}-{max(times):.1f} s" if times else "-"
        worst = f"{max(times) / args.timeout:.2f}x" if times else "-"
        print(
            f"{case:20} {len(runs)} runs: {span} (worst {worst} the {args.timeout:g} s timeout, "
            f"bound 4x): {'within' if within else 'NOT within'}; "
            f"{'the same verdict' if same else f'{len(verdicts)} different verdicts'} in every run",
            flush=True,
        )
        for v in sorted(verdicts, key=len)[:3]:
            print("    " + "\n    ".join(v) if v else "    (no verdict)")
            if not same:
                print("    ---")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
