"""Label the real-issue reproductions by running them for real: torchrun, gloo on CPU.

    python -m bench.accuracy.real_label                 # programs without a current label
    python -m bench.accuracy.real_label --names a b     # only these
    python -m bench.accuracy.real_label --force         # every program again
    python -m bench.accuracy.real_label --check         # re-run, compare with labels, no write

Each program runs alone (one torchrun launch at a time, `nice -n 10`) as

    CASE_TIMEOUT_S=6 timeout 120 torchrun --nproc-per-node N -m bench.accuracy.real_launch PROG DIR

and is labelled from what its ranks did (see real_launch.py), never from torchrun's exit code:
- fail: some rank raised an error of its own, or died (gloo aborts on some size mismatches);
- hang: no rank failed on its own and some rank was still waiting in communication — its wait
  timed out, its peer closed the connection while it waited, or it never returned at all;
- ok: every rank returned;
- unknown: some rank had not even started the program when the outer timeout fired (a loaded
  machine); such a launch is repeated.
A program labelled hang is run a second time; the label holds only if both runs agree.
Labels go to bench/accuracy/real_issues/labels.json (with the program's hash).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REAL = HERE / "real_issues"
MANIFEST = REAL / "manifest.yaml"
LABELS = REAL / "labels.json"
GROUP_TIMEOUT_S = 6.0
OUTER_TIMEOUT_S = 120.0
LABELS_OF_RUNS = ("ok", "hang", "fail")


def program_sha(path: Path) -> str:
    """The label holds for this exact program text."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def load_manifest() -> list[dict]:
    """The manifest's entries, in file order."""
    return yaml.safe_load(MANIFEST.read_text())["programs"]


def load_labels() -> dict:
    """Stored labels: {name: {label, runs, ...}}."""
    return json.loads(LABELS.read_text())["labels"] if LABELS.exists() else {}


def save_labels(labels: dict) -> None:
    import torch

    out = {
        "about": (
            "Ground truth of bench/accuracy/real_issues: each program run for real with "
            f"torchrun, gloo on CPU (torch {torch.__version__}), CASE_TIMEOUT_S="
            f"{GROUP_TIMEOUT_S:g}, by bench/accuracy/real_label.py"
        ),
        "labels": dict(sorted(labels.items())),
    }
    tmp = LABELS.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(LABELS)


def label_of(ranks: list[dict]) -> str:
    """ok / hang / fail from what each rank did."""
    statuses = [r["status"] for r in ranks]
    if any(s == "not_started" for s in statuses):
        return "unknown"  # the machine was too slow to even start a rank: run it again
    if any(s in ("error", "died") for s in statuses):
        return "fail"
    if any(s != "ok" for s in statuses):
        return "hang"
    return "ok"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_ABORT = re.compile(r"what\(\):\s*(.*)")


def _died_reason(log: str, rank: int) -> str:
    for line in log.splitlines():
        if f"[rank{rank}]" in line or "what():" in line:
            m = _ABORT.search(line)
            if m:
                return m.group(1).strip()[:300]
    return "exited without reporting"


def run_once(
    program: Path,
    nproc: int,
    group_timeout: float = GROUP_TIMEOUT_S,
    outer: float = OUTER_TIMEOUT_S,
    python: list[str] | None = None,
) -> dict:
    """One torchrun launch of `program`; its label and what each rank did. `python`: the
    interpreter command of torchrun and its workers (default `sys.executable`; the tests pass
    their warm stand-in, tests/warm_python.py), the workers then started by `--no-python`."""
    with tempfile.TemporaryDirectory(prefix="real_issue_") as tmp:
        out_dir = Path(tmp) / "ranks"
        out_dir.mkdir()
        work = Path(tmp) / "cwd"  # the program's files (checkpoints, caches) land here
        work.mkdir()
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            CASE_TIMEOUT_S=f"{group_timeout:g}",
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        cmd = [
            "nice",
            "-n",
            "10",
            "timeout",
            f"{outer:g}",
            *(python or [sys.executable]),
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(nproc),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_free_port()),
            *(["--no-python", *python, "-u"] if python else []),
            "-m",
            "bench.accuracy.real_launch",
            str(program),
            str(out_dir),
        ]
        began = time.monotonic()
        proc = subprocess.run(
            cmd,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        seconds = time.monotonic() - began
        log = proc.stdout + proc.stderr
        ranks = []
        for r in range(nproc):
            f = out_dir / f"rank{r}.json"
            if f.exists():
                ranks.append(json.loads(f.read_text()))
            elif not (out_dir / f"rank{r}.started").exists():
                ranks.append({"rank": r, "status": "not_started"})
            elif proc.returncode in (124, 137):
                ranks.append({"rank": r, "status": "stuck"})
            else:
                ranks.append({"rank": r, "status": "died", "error": _died_reason(log, r)})
    return {"label": label_of(ranks), "seconds": round(seconds, 1), "ranks": ranks}


def label_program(entry: dict) -> dict:
    """Run a program (twice if it hangs); the stored label record."""
    path = REAL / f"{entry['name']}.py"
    runs = [run_once(path, entry["nproc"])]
    for _ in range(2):  # a launch too slow to start its ranks says nothing
        if runs[-1]["label"] != "unknown":
            break
        runs[-1] = run_once(path, entry["nproc"])
    if runs[0]["label"] == "hang":
        runs.append(run_once(path, entry["nproc"]))
    outcomes = [r["label"] for r in runs]
    label = outcomes[0] if len(set(outcomes)) == 1 else "unstable"
    return {
        "label": label,
        "runs": outcomes,
        "seconds": [r["seconds"] for r in runs],
        "ranks": runs[0]["ranks"],
        "sha": program_sha(path),
        "labelled": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Label the real-issue reproductions by running them.")
    p.add_argument("--names", nargs="*", help="only these programs")
    p.add_argument("--force", action="store_true", help="relabel programs that have a label")
    p.add_argument("--check", action="store_true", help="re-run, compare with stored labels")
    args = p.parse_args(argv)
    manifest = load_manifest()
    # Labels of programs no longer in the manifest are dropped at the next write.
    labels = {k: v for k, v in load_labels().items() if k in {e["name"] for e in manifest}}
    todo = manifest
    if args.names:
        todo = [e for e in todo if e["name"] in set(args.names)]
        unknown = set(args.names) - {e["name"] for e in manifest}
        if unknown:
            print(f"{MANIFEST}: unknown program(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
    elif not args.force and not args.check:
        todo = [
            e
            for e in todo
            if labels.get(e["name"], {}).get("sha") != program_sha(REAL / f"{e['name']}.py")
        ]
    if not todo:
        print("nothing to run")
        return 0
    differ = []
    began = time.monotonic()
    for n, entry in enumerate(todo, 1):
        rec = label_program(entry)
        expected = entry.get("label")
        mark = "" if rec["label"] == expected else f"   <-- manifest says {expected}"
        why = next((r.get("error", "") for r in rec["ranks"] if r["status"] != "ok"), "")
        print(
            f"[{n}/{len(todo)}] {entry['name']}: {rec['label']} {rec['runs']} "
            f"({'+'.join(f'{s:g}' for s in rec['seconds'])}s) {why[:120]}{mark}",
            flush=True,
        )
        if rec["label"] != (labels.get(entry["name"], {}).get("label") if args.check else expected):
            differ.append(entry["name"])
        if not args.check:
            labels[entry["name"]] = rec
            save_labels(labels)
    wall = time.monotonic() - began
    print(f"{len(todo)} programs in {wall:.0f}s; differ from the manifest: {differ or 'none'}")
    print(
        " labels:", dict(Counter(labels[e["name"]]["label"] for e in todo if e["name"] in labels))
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
