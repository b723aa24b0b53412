"""Score `commlint check` (and `commlint run`) on the real-issue reproductions.

    python -m bench.accuracy.real_score                # check: run what is missing, write doc
    python -m bench.accuracy.real_score --tool run     # the dry-run too (slower)
    python -m bench.accuracy.real_score --table-only   # re-render the doc section only

The programs of bench/accuracy/real_issues/ are scored apart from the generated benchmark:
their section of docs/accuracy.md ("Real-issue reproductions") is written here and kept by
`python -m bench.accuracy.score`, which re-renders the rest of that page.

The linter measured is the installed `commlint` executable, run with PYTHONPATH unset, so the
figures are those of the checkout commlint is installed from (its commit is recorded);
`--checkout DIR` measures another checkout instead (a worktree: PYTHONPATH=DIR, its commit
recorded, with `+dirty` when it has uncommitted changes). A
program is flagged when the command exits 1 (any finding), as in score.py. Precision and
recall are given over the programs whose outcome the source alone decides (`static_visible`),
and over all of them; a bug is positive (label hang or fail).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.accuracy.real_label import LABELS, REAL, load_labels, load_manifest, program_sha

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DOC = ROOT / "docs" / "accuracy.md"
TOOLS = ("check", "run")
POSITIVE = {"hang", "fail"}
START = "<!-- real-issues:start -->"
END = "<!-- real-issues:end -->"


def results_path(tool: str) -> Path:
    return REAL / f"results_{tool}.json"


CHECKOUT: Path | None = None  # set by --checkout: measure this tree's commlint, not the installed


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if CHECKOUT is not None:
        env["PYTHONPATH"] = str(CHECKOUT)
    return env


def installed_commlint() -> tuple[str, str]:
    """(the `commlint` executable, the commit of the checkout its package comes from)."""
    exe = shutil.which("commlint")
    if exe is None:
        raise SystemExit("commlint is not installed (no `commlint` on PATH)")
    where = subprocess.run(
        [sys.executable, "-c", "import commlint, os; print(os.path.dirname(commlint.__file__))"],
        cwd="/",
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=where or "/", capture_output=True, text=True
    ).stdout.strip()
    if commit and CHECKOUT is not None:
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "commlint"],
            cwd=CHECKOUT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        commit += "+dirty" if dirty else ""
    return exe, commit or "unknown"


def command(tool: str, exe: str, entry: dict, out: str) -> list[str]:
    path = str(REAL / f"{entry['name']}.py")
    if tool == "check":
        return [exe, "check", "--no-cache", "--format", "json", "-o", out, path]
    return [
        exe,
        "run",
        "--nproc-per-node",
        str(entry["nproc"]),
        "--timeout",
        "60",
        "--format",
        "json",
        "-o",
        out,
        path,
    ]


def run_one(tool: str, exe: str, entry: dict) -> dict:
    """One tool on one program: flagged, codes, first findings, wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        began = time.perf_counter()
        proc = subprocess.run(
            ["nice", "-n", "10", *command(tool, exe, entry, out)],
            cwd=tmp,
            env=_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - began
        report = {}
        if os.path.exists(out):
            try:
                report = json.loads(Path(out).read_text())
            except ValueError:
                report = {}
    findings = report.get("findings", [])
    return {
        "exit": proc.returncode,
        "flagged": proc.returncode == 1,
        "codes": sorted({f["code"] for f in findings}),
        "findings": [
            {k: f.get(k) for k in ("code", "severity", "line", "message")} for f in findings
        ][:4],
        "error": proc.stderr.strip().splitlines()[-1][:300]
        if proc.returncode not in (0, 1) and proc.stderr.strip()
        else "",
        "seconds": round(seconds, 2),
    }


def labelled_programs() -> list[tuple[dict, dict]]:
    """(manifest entry, label record) of every program whose label is current."""
    labels = load_labels()
    out = []
    for entry in load_manifest():
        lab = labels.get(entry["name"])
        path = REAL / f"{entry['name']}.py"
        if lab and lab.get("sha") == program_sha(path) and lab["label"] in ("ok", "hang", "fail"):
            out.append((entry, lab))
    return out


def score_tool(tool: str, rerun: bool) -> None:
    exe, commit = installed_commlint()
    p = results_path(tool)
    data = json.loads(p.read_text()) if p.exists() else {"results": {}}
    todo = []
    for entry, _ in labelled_programs():
        old = data["results"].get(entry["name"])
        sha = program_sha(REAL / f"{entry['name']}.py")
        if rerun or not old or old.get("sha") != sha or old.get("commit") != commit:
            todo.append(entry)
    print(f"commlint {tool} (installed, commit {commit}): {len(todo)} programs to run", flush=True)
    for n, entry in enumerate(todo, 1):
        res = run_one(tool, exe, entry)
        res.update(sha=program_sha(REAL / f"{entry['name']}.py"), commit=commit)
        data["results"][entry["name"]] = res
        if n % 10 == 0 or n == len(todo):
            data["results"] = dict(sorted(data["results"].items()))
            p.write_text(json.dumps(data, indent=1) + "\n")
            print(f"  {n}/{len(todo)}", flush=True)


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "n/a"


def confusion(rows: list[tuple[bool, bool]]) -> dict:
    """rows of (is a bug, flagged)."""
    c = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for bug, flagged in rows:
        c[("t" if bug == flagged else "f") + ("p" if flagged else "n")] += 1
    c["precision"] = _pct(c["tp"], c["tp"] + c["fp"])
    c["recall"] = _pct(c["tp"], c["tp"] + c["fn"])
    return c


def summary(tool: str) -> dict | None:
    """Confusion over the decidable programs and over all, misses and false alarms."""
    p = results_path(tool)
    if not p.exists():
        return None
    res = json.loads(p.read_text())["results"]
    progs = [(e, lab, res[e["name"]]) for e, lab in labelled_programs() if e["name"] in res]
    if not progs:
        return None
    rows_all = [(lab["label"] in POSITIVE, r["flagged"]) for _, lab, r in progs]
    rows_vis = [
        (lab["label"] in POSITIVE, r["flagged"]) for e, lab, r in progs if e["static_visible"]
    ]
    misses = [(e, lab, r) for e, lab, r in progs if lab["label"] in POSITIVE and not r["flagged"]]
    false = [(e, lab, r) for e, lab, r in progs if lab["label"] not in POSITIVE and r["flagged"]]
    commits = sorted({r.get("commit", "?") for _, _, r in progs})
    return {
        "n": len(progs),
        "visible": confusion(rows_vis),
        "all": confusion(rows_all),
        "misses": misses,
        "false": false,
        "commits": commits,
        "errors": [(e, r) for e, _, r in progs if r["exit"] not in (0, 1)],
    }


def load_causes() -> dict:
    """Hand-written causes of misses and false alarms (real_issues/causes.yaml)."""
    import yaml

    path = REAL / "causes.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def render_section() -> str:
    """The "Real-issue reproductions" section of docs/accuracy.md."""
    progs = labelled_programs()
    bugs = [e for e, lab in progs if lab["label"] in POSITIVE]
    counts = {k: sum(1 for _, lab in progs if lab["label"] == k) for k in ("ok", "hang", "fail")}
    vis_bugs = sum(1 for e, lab in progs if lab["label"] in POSITIVE and e["static_visible"])
    vis_ok = sum(1 for e, lab in progs if lab["label"] == "ok" and e["static_visible"])
    reports = len({e["url"] for e, _ in progs})
    lines = [
        START,
        "## Real-issue reproductions",
        "",
        f"{len(progs)} small programs reduced from {reports} public bug reports of hangs, "
        "deadlocks, NCCL timeouts and collective mismatches (PyTorch, Lightning, transformers, "
        "accelerate, DeepSpeed, torchtitan, NCCL and projects built on them), written anew with "
        "plain `torch.distributed` on gloo, the framework calls replaced by the collectives they "
        "make; where the thread settled on a fix, its fixed twin is here too. Each program's "
        "header cites its report; `bench/accuracy/real_issues/manifest.yaml` gives the cause "
        "in one line. They are scored here, apart from the generated benchmark above.",
        "",
        f"Ground truth from real runs (`python -m bench.accuracy.real_label`: one torchrun "
        f"launch per program, gloo on CPU, 6 s process-group timeout, hangs run twice): "
        f"{counts['hang']} hang, {counts['fail']} fail, {counts['ok']} ok. "
        f"`static_visible` marks the programs whose outcome the source alone decides: "
        f"{vis_bugs} of the {len(bugs)} bugs and {vis_ok} of the {counts['ok']} correct programs.",
        "",
        "| tool | programs | decidable: precision | decidable: recall | tp | fp | fn | tn "
        "| all: precision | all: recall |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    sums = {t: summary(t) for t in TOOLS}
    for tool, s in sums.items():
        if s is None:
            continue
        v, a = s["visible"], s["all"]
        scored = str(s["n"]) if s["n"] == len(progs) else f"{s['n']} of {len(progs)} (partial)"
        lines.append(
            f"| `commlint {tool}` (installed, {', '.join(s['commits'])}) | {scored} | "
            f"{v['precision']} | {v['recall']} | {v['tp']} | {v['fp']} | {v['fn']} | {v['tn']} "
            f"| {a['precision']} | {a['recall']} |"
        )
    for tool, s in sums.items():
        if s is None:
            continue
        lines += ["", f"### Misses and false alarms of `commlint {tool}` on the reproductions", ""]
        causes = load_causes()
        why_missed = causes.get("causes", {}) if tool == "check" else {}
        for e, lab, _ in s["misses"]:
            vis = "decidable" if e["static_visible"] else "needs execution"
            lines.append(f"- miss ({lab['label']}, {vis}): `{e['name']}` — {e['why']}")
            if e["name"] in why_missed:
                lines.append(f"  - why missed: {why_missed[e['name']]}")
        for e, _, r in s["false"]:
            vis = "decidable" if e["static_visible"] else "needs execution"
            codes = ", ".join(r["codes"]) or "exit 1"
            lines.append(f"- false alarm ({vis}, {codes}): `{e['name']}` — {e['why']}")
            if e["name"] in why_missed:
                lines.append(f"  - why flagged: {why_missed[e['name']]}")
        if tool == "check":
            for name, note in causes.get("flagged_for_another_reason", {}).items():
                lines.append(f"- found for another reason: `{name}` — {note}")
        for e, r in s["errors"]:
            lines.append(f"- error (exit {r['exit']}): `{e['name']}` — {r['error']}")
        if not (s["misses"] or s["false"] or s["errors"]):
            lines.append("- none")
    lines += [
        "",
        "Reproduce: `python -m bench.accuracy.real_label` (labels), "
        "`python -m bench.accuracy.real_score [--tool run]` (scores and this section).",
        END,
    ]
    return "\n".join(lines) + "\n"


def splice(doc: str, section: str) -> str:
    """`doc` with its real-issues section replaced by `section` (added at the end if absent)."""
    if START in doc and END in doc:
        head, rest = doc.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        return head + section + ("\n" + tail if tail else "")
    return doc.rstrip("\n") + "\n\n" + section


def write_doc() -> None:
    DOC.write_text(splice(DOC.read_text(), render_section()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Score commlint on the real-issue reproductions.")
    ap.add_argument("--tool", choices=TOOLS, action="append", help="check (default) and/or run")
    ap.add_argument("--rerun", action="store_true", help="ignore stored results")
    ap.add_argument("--table-only", action="store_true", help="only re-render the doc section")
    ap.add_argument(
        "--checkout",
        type=Path,
        help="measure this checkout's commlint (a worktree), not the installed",
    )
    args = ap.parse_args(argv)
    global CHECKOUT
    if args.checkout is not None:
        if not (args.checkout / "commlint" / "__init__.py").is_file():
            print(
                f"{args.checkout}: not a commlint checkout (no commlint/__init__.py)",
                file=sys.stderr,
            )
            return 2
        CHECKOUT = args.checkout.resolve()
    if not LABELS.exists():
        print(
            f"{LABELS}: no labels; run `python -m bench.accuracy.real_label` first", file=sys.stderr
        )
        return 2
    if not args.table_only:
        for tool in args.tool or ["check"]:
            score_tool(tool, args.rerun)
    write_doc()
    print(f"wrote {DOC.relative_to(ROOT)}")
    for tool in TOOLS:
        s = summary(tool)
        if s:
            v = s["visible"]
            print(
                f"commlint {tool}: {s['n']} programs; decidable: precision {v['precision']}, "
                f"recall {v['recall']} (tp {v['tp']} fp {v['fp']} fn {v['fn']} tn {v['tn']}); "
                f"all: precision {s['all']['precision']}, recall {s['all']['recall']}"
            )
            for e, lab, _ in s["misses"]:
                print(f"  miss: {e['name']} ({lab['label']}, static_visible={e['static_visible']})")
            for e, _, r in s["false"]:
                print(f"  false alarm: {e['name']} {r['codes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
