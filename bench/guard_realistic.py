"""The realistic corpus (../shared/corpus/realistic/) under the runtime guard, real gloo runs.

    python bench/guard_realistic.py [--timeout S] [--cases a,b,...] [--json OUT]

Each case is launched as its manifest says — from inside `cases/<name>/`, `torchrun
--nproc-per-node <nproc> main.py` — but under `-m commlint.guard --timeout S`, with the
cases' process-group timeout (`CASE_TIMEOUT_S`) at 30 s, so that a hang the guard misses shows
as a 30 s timeout, not as a diagnosis. Measured against the manifest's labels (each case run
for real, unguarded):
- ok: the guarded run exits 0 and every rank's stdout and stderr equal the unguarded run's
  (log timestamps, printed durations and the guard's own `commlint guard` lines aside). A
  line that differs is judged against a second unguarded run: only lines both unguarded runs
  print alike count;
- hang / fail: the guarded run exits non-zero with a guard verdict (a `CLnnn` code), names a
  line of the case's own files, and — for a hang — comes within 4x the guard's timeout of the
  first blocked call (the `hang diagnosed N s after` figure, or a fingerprint mismatch, which
  is raised before the call).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "realistic"
CASE_TIMEOUT = 30
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
_DURATION = re.compile(r"\b\d+(\.\d+)? ?(s|ms|us)\b")  # an epoch's or a call's time
_CODE = re.compile(r"\bCL\d{3}\b")
_RACE = "terminate called without an active exception"
_AFTER = re.compile(r"hang diagnosed ([0-9.]+) s after")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(case: dict, guard: list[str] | None, corpus: Path) -> dict:
    """One torchrun of a case; per-rank stdout/stderr from torchrun's log folder."""
    folder = corpus / "cases" / case["name"]
    logs = Path(tempfile.mkdtemp(prefix="guard-real-"))
    env = dict(os.environ, CASE_TIMEOUT_S=str(CASE_TIMEOUT), PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    under = ["-m", "commlint.guard", *guard] if guard is not None else []
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(case["nproc"])]
    cmd += ["--master-port", str(free_port()), "--log-dir", str(logs), "--redirects", "3"]
    cmd += [*under, "main.py"]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT * 4
        )
        rc: int | None = proc.returncode
        err = proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = None, str(exc.stderr or "")
    wall = time.monotonic() - started
    ranks: dict[int, dict[str, str]] = {}
    for f in logs.rglob("*.log"):
        rank = int(f.parent.name)  # <log-dir>/<run id>/attempt_0/<rank>/stdout.log
        ranks.setdefault(rank, {})[f.stem] = f.read_text(errors="replace")
    shutil.rmtree(logs, ignore_errors=True)
    return {"rc": rc, "wall": round(wall, 2), "ranks": ranks, "launcher": err}


def normalised(text: str) -> list[str]:
    text = _DURATION.sub("<duration>", _STAMP.sub("<time>", text))
    # torch/gloo's exit-time abort message is teardown noise, judged by `exit_race_only`
    return [ln for ln in text.splitlines() if "commlint guard" not in ln and _RACE not in ln]


def differing(a: dict, b: dict) -> list[tuple[int, str, str, str]]:
    """(rank, stream, line of a, line of b) where two runs' outputs differ."""
    out = []
    for rank in sorted(set(a) | set(b)):
        for stream in ("stdout", "stderr"):
            la = normalised(a.get(rank, {}).get(stream, ""))
            lb = normalised(b.get(rank, {}).get(stream, ""))
            for i in range(max(len(la), len(lb))):
                x = la[i] if i < len(la) else "<none>"
                y = lb[i] if i < len(lb) else "<none>"
                if x != y:
                    out.append((rank, stream, x, y))
    return out


def named_lines(text: str, folder: Path) -> list[str]:
    """`file.py:LINE` / `File "file.py", line N` of the case's own files in `text`."""
    names = {p.name for p in folder.rglob("*.py")}
    found = []
    for m in re.finditer(r"([\w/.-]+\.py):(\d+)|File \"([^\"]+\.py)\", line (\d+)", text):
        path, line = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if Path(path).name in names and "site-packages" not in path:
            found.append(f"{Path(path).name}:{line}")
    return list(dict.fromkeys(found))


def exit_race_only(run: dict) -> bool:
    """The run failed only by torch/gloo's exit-time race: a rank that printed all it prints
    (its output equals the unguarded run's, checked by the caller) then died of SIGABRT in
    C++ teardown. Classified by what the ranks did, not by the launcher's exit code."""
    if run["rc"] is None:
        return False
    aborted = [r for r in run["ranks"].values() if _RACE in r.get("stderr", "")]
    signals = re.findall(r"exitcode\s*:\s*(-?\d+)", run["launcher"])
    return bool(aborted) and bool(signals) and all(s == "-6" for s in signals)


def judge(case: dict, guarded: dict, timeout: float, corpus: Path) -> dict:
    folder = corpus / "cases" / case["name"]
    text = guarded["launcher"] + "".join(
        r.get("stderr", "") + r.get("stdout", "") for r in guarded["ranks"].values()
    )
    codes = sorted(set(_CODE.findall(text)))
    after = [float(x) for x in _AFTER.findall(text)]
    row = {
        "name": case["name"],
        "nproc": case["nproc"],
        "label": case["label"],
        "rc": guarded["rc"],
        "wall": guarded["wall"],
        "codes": codes,
        "lines": named_lines(text, folder)[:6],
        "diagnosed_after": max(after) if after else None,
        "degraded": "guard degraded" in text,
    }
    if case["label"] == "ok":
        reference = launch(case, None, corpus)
        if reference["rc"] != 0 and not exit_race_only(reference):
            reference = launch(case, None, corpus)  # a correct program: one more reference
        diff = differing(reference["ranks"], guarded["ranks"])
        if diff:  # lines that differ between two unguarded runs are not the guard's doing
            again = launch(case, None, corpus)
            noisy = {(r, s, x) for r, s, x, _ in differing(reference["ranks"], again["ranks"])}
            diff = [d for d in diff if (d[0], d[1], d[2]) not in noisy]
        row["unguarded_rc"] = reference["rc"]
        row["diff"] = diff[:5]
        row["shutdown_race"] = guarded["rc"] != 0 and exit_race_only(guarded)
        ended = guarded["rc"] == 0 or row["shutdown_race"]
        row["unguarded_race"] = reference["rc"] != 0 and exit_race_only(reference)
        row["pass"] = ended and (reference["rc"] == 0 or row["unguarded_race"]) and not diff
    else:
        in_time = row["diagnosed_after"] is None or row["diagnosed_after"] <= 4 * timeout
        row["pass"] = bool(guarded["rc"] not in (0, None) and codes and row["lines"] and in_time)
    if not row["pass"]:
        row["tail"] = text[-2500:]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--cases", default="")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    corpus = Path(args.corpus)
    cases = yaml.safe_load((corpus / "manifest.yaml").read_text())["cases"]
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in cases if not wanted or c["name"] in wanted]
    rows = []
    for case in cases:
        guarded = launch(case, ["--timeout", str(args.timeout)], corpus)
        row = judge(case, guarded, args.timeout, corpus)
        rows.append(row)
        after = row["diagnosed_after"]
        print(
            f"{row['name']:31} {row['nproc']} {row['label']:4} rc={row['rc']} "
            f"wall={row['wall']:5.1f}s {'PASS' if row['pass'] else 'MISS'} "
            + ("(exit-time SIGABRT after the last line) " if row.get("shutdown_race") else "")
            + f"{','.join(row['codes'])} {' '.join(row['lines'][:3])}"
            + (f" after={after:.1f}s" if after is not None else ""),
            flush=True,
        )
        if not row["pass"]:
            print("   " + "\n   ".join(row.get("tail", "").splitlines()[-25:]), flush=True)
            for d in row.get("diff", []):
                print(f"   diff rank {d[0]} {d[1]}: {d[2]!r} vs guarded {d[3]!r}", flush=True)
    for label in ("ok", "hang", "fail"):
        sub = [r for r in rows if r["label"] == label]
        if sub:
            print(f"{label:5} {sum(r['pass'] for r in sub)}/{len(sub)} pass")
    after = [r["diagnosed_after"] for r in rows if r["diagnosed_after"] is not None]
    if after:
        print(
            f"hang verdicts {min(after):.1f}-{max(after):.1f} s after the first block "
            f"(guard timeout {args.timeout:g} s, bound {4 * args.timeout:g} s)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
