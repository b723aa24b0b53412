"""Real gloo runs of bench/accuracy's labelled programs under the runtime guard.

    python bench/guard_accuracy.py [--per-label N] [--timeout S] [--ids a,b,...] [--json OUT]

Each program runs with `torchrun --standalone -m commlint.guard --timeout S prog.py` (its
process groups get a 30 s timeout, far above the guard's). Measured against the ground truth
of bench/accuracy/labels.json (each program run for real, unguarded):
- ok: the run exits 0 and prints the same per-rank results as the unguarded run;
- hang / fail / corrupt: the run exits non-zero, within 2× the guard timeout of start-up, and
  its stderr names the program line where the unguarded run hung or failed (a guard report's
  `prog.py:LINE`, or the traceback of the rank that raised).
Start-up (torch import, rendezvous) is measured by the ok runs of the same batch and
subtracted: what is left is how long the program ran, hang included.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from bench.guard_jobs import command, job_env
except ImportError:  # run as a script: bench/ itself is on sys.path
    from guard_jobs import command, job_env

ROOT = Path(__file__).resolve().parent.parent
ACC = ROOT / "bench" / "accuracy"
PG_TIMEOUT = 30


def load() -> tuple[dict[str, dict], dict[str, dict]]:
    programs = {p["id"]: p for p in json.loads((ACC / "programs.json").read_text())["programs"]}
    labels = json.loads((ACC / "labels.json").read_text())["labels"]
    return programs, labels


def pick(per_label: int, world_size: int = 2, seed: int = 14) -> list[str]:
    """`per_label` programs of each label (ok, hang, fail, corrupt) of one world size."""
    programs, labels = load()
    rng = random.Random(seed)
    out: list[str] = []
    for label in ("ok", "hang", "fail", "corrupt"):
        ids = sorted(
            i
            for i, p in programs.items()
            if p["world_size"] == world_size and labels.get(i, {}).get("label") == label
        )
        out += rng.sample(ids, min(per_label, len(ids)))
    return out


def expected_lines(label: dict) -> set[int]:
    """Lines where the unguarded run's ranks hung or failed."""
    lines = set()
    for r in label.get("ranks", []):
        where = r.get("where") or ""
        if where.startswith("line "):
            lines.add(int(where.split()[1]))
    return lines


def run_program(
    pid: str, timeout: float, extra: list[str] | None = None, python: list[str] | None = None
) -> dict:
    """Run one labelled program under the guard; return what happened. `python`: the
    interpreter command of torchrun and its workers (see `guard_jobs.command`)."""
    programs, labels = load()
    prog = programs[pid]
    path = ACC / prog["path"]
    env = job_env(ACC_TIMEOUT=str(PG_TIMEOUT))
    logs = tempfile.mkdtemp(prefix="guard-acc-")
    # each rank's stdout to its own file: two ranks printing at once interleave
    cmd = command(
        path.name,
        guard=["--timeout", str(timeout), *(extra or [])],
        nproc=prog["world_size"],
        flags=["--log-dir", logs, "--redirects", "1"],
        python=python,
    )
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=path.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=PG_TIMEOUT * 4,
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, str(exc.stdout or ""), str(exc.stderr or "")
    wall = time.monotonic() - started
    out += "".join(p.read_text() for p in sorted(Path(logs).rglob("stdout.log")))
    shutil.rmtree(logs, ignore_errors=True)
    label = labels[pid]
    return {
        "id": pid,
        "label": label["label"],
        "rc": rc,
        "wall": round(wall, 2),
        "results_match": _results_match(out, label),
        "site_named": _site_named(err, path.name, expected_lines(label)),
        "site_near": _site_named(err, path.name, _near(expected_lines(label))),
        "diagnosed_after": _diagnosed_after(err),
        "raised_before_call": "CommlintGuardError" in err,
        "guard_report": "commlint guard:" in err,
        "codes": sorted({w for w in err.replace(":", " ").split() if _is_code(w)}),
        "stderr_tail": err[-3000:],
    }


def _is_code(word: str) -> bool:
    return len(word) == 5 and word.startswith("CL") and word[2:].isdigit()


def _results_match(stdout: str, label: dict) -> bool:
    """Every rank's printed `main()` result equals the unguarded run's checks."""
    got = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("[("):
            try:
                got.append(sorted((str(k), float(v)) for k, v in ast.literal_eval(line)))
            except (ValueError, SyntaxError):
                return False
    want = [sorted((str(k), float(v)) for k, v in r.get("checks", [])) for r in label["ranks"]]
    if len(got) != len(want):
        return False
    unmatched = list(want)
    for g in got:
        hit = next((w for w in unmatched if _close(g, w)), None)
        if hit is None:
            return False
        unmatched.remove(hit)
    return True


def _close(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        ka == kb and math.isclose(va, vb, rel_tol=1e-5, abs_tol=1e-6)
        for (ka, va), (kb, vb) in zip(a, b, strict=True)
    )


def _near(lines: set[int], span: int = 3) -> set[int]:
    """The guard often stops a program one call earlier than gloo failed (a reordered pair
    of sends is caught at the first message, gloo aborts at the second): lines within
    `span` of the unguarded failure count as "near"."""
    return {n + d for n in lines for d in range(-span, span + 1)}


def _diagnosed_after(stderr: str) -> float | None:
    """Seconds from the first blocked call to the verdict, as the guard's report says."""
    marker = "hang diagnosed "
    if marker not in stderr:
        return None
    word = stderr.split(marker, 1)[1].split()[0]
    try:
        return float(word)
    except ValueError:
        return None


def _site_named(stderr: str, name: str, lines: set[int]) -> bool:
    return any(f"{name}:{n}" in stderr or f'{name}", line {n}' in stderr for n in lines)


def verdicts(results: list[dict], timeout: float) -> dict:
    """Score a batch; start-up is the median wall time of the batch's ok runs."""
    ok_walls = [r["wall"] for r in results if r["label"] == "ok" and r["rc"] == 0]
    startup = statistics.median(ok_walls) if ok_walls else 0.0
    for r in results:
        extra = r["wall"] - startup
        if r["label"] == "ok":
            r["pass"] = r["rc"] == 0 and r["results_match"]
        else:
            # a guard verdict says when it came; a fingerprint error comes before the call;
            # otherwise (the program's own error) the wall time beyond start-up is the measure
            if r["diagnosed_after"] is not None:
                r["within"] = r["diagnosed_after"] <= 2 * timeout
            else:
                r["within"] = r["raised_before_call"] or extra <= 2 * timeout
            r["pass"] = r["rc"] not in (0, None) and r["site_near"] and r["within"]
        r["beyond_startup"] = round(extra, 2)
    return {"startup": round(startup, 2), "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-label", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--ids", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    ids = [i for i in args.ids.split(",") if i] or pick(args.per_label)
    results = []
    for pid in ids:
        r = run_program(pid, args.timeout)
        results.append(r)
        print(
            f"{pid:22} {r['label']:8} rc={r['rc']} wall={r['wall']:6.2f}s "
            f"results_match={r['results_match']} site={r['site_named']}/{r['site_near']} "
            f"codes={','.join(r['codes'])}",
            flush=True,
        )
    scored = verdicts(results, args.timeout)
    print(f"start-up (median of ok runs): {scored['startup']:.2f} s")
    for label in ("ok", "hang", "fail", "corrupt"):
        rows = [r for r in results if r["label"] == label]
        if not rows:
            continue
        passed = sum(r["pass"] for r in rows)
        extra = [r["beyond_startup"] for r in rows]
        after = [r["diagnosed_after"] for r in rows if r.get("diagnosed_after") is not None]
        exact = sum(r["site_named"] for r in rows)
        stamp = (
            f"; guard verdicts {min(after):.1f}-{max(after):.1f} s after the block" if after else ""
        )
        print(
            f"{label:8} {passed}/{len(rows)} pass (site exact {exact}/{len(rows)}); wall beyond "
            f"start-up: max {max(extra):.2f} s, median {statistics.median(extra):.2f} s{stamp} "
            f"(guard timeout {args.timeout:g} s, bound {2 * args.timeout:g} s)"
        )
    for r in results:
        if not r["pass"]:
            print(f"FAILED {r['id']} ({r['label']}):\n{r['stderr_tail'][-1500:]}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(scored, indent=1))
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
