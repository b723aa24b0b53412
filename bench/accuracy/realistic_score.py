"""Score `commlint check` on the realistic development set (issue 29's must-show).

    python -m bench.accuracy.realistic_score                  # this checkout's commlint
    python -m bench.accuracy.realistic_score --corpus DIR -v  # another copy, every report shown

The set is ../shared/corpus/realistic relative to the repository root (`--corpus` names another
place): one directory per program under `cases/`, and `manifest.yaml` listing each case's
`name`, `label` (ok, hang, fail, ... from real gloo runs), `static_visible` (the source alone
decides it) and `category`. Each case directory is checked as a project
(`commlint check --format concise --no-cache .` inside it), with this checkout's package first
on PYTHONPATH so that the code measured is the code beside this script.

A case is flagged when the command exits 1. Per case one line: TP/FN (a bug the source
decides, found or missed), tp(nsv)/fn(nsv) (a bug it does not decide), TN/FP (a correct
program), rcN (the linter exited N: an error). The last line counts each kind; the guard of
record is TP and FP (no false error on a correct program). Exit code 0, or 2 when the corpus
cannot be read.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus" / "realistic"


def verdict(case: dict, exit_code: int) -> str:
    """The case's kind: TP, FN, tp(nsv), fn(nsv), TN, FP or rcN."""
    bug = case["label"] != "ok"
    if bug and case["static_visible"]:
        return "TP" if exit_code == 1 else "FN"
    if bug:
        return "tp(nsv)" if exit_code == 1 else "fn(nsv)"
    if exit_code == 1:
        return "FP"
    return "TN" if exit_code == 0 else f"rc{exit_code}"


def check_case(directory: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "commlint", "check", "--format", "concise", "--no-cache", "."],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Score commlint check on the realistic set.")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="the set's directory")
    ap.add_argument("-v", "--verbose", action="store_true", help="show every case's report")
    args = ap.parse_args(argv)
    manifest = args.corpus / "manifest.yaml"
    try:
        cases = yaml.safe_load(manifest.read_text())["cases"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        print(f"{manifest}: cannot read the manifest ({exc})", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for case in cases:
        proc = check_case(args.corpus / "cases" / case["name"])
        kind = verdict(case, proc.returncode)
        counts[kind] = counts.get(kind, 0) + 1
        print(
            f"{kind:8} {case['name']:32} {case['label']:5} sv={case['static_visible']!s:5} "
            f"rc={proc.returncode} {case.get('category', '')}",
            flush=True,
        )
        if args.verbose or kind in ("FP", "FN") or kind.startswith("rc"):
            for line in (proc.stdout + proc.stderr).splitlines()[:6]:
                if "Found" not in line:
                    print("        ", line[:220])
    print(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
