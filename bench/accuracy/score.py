"""Score `commlint check` and `commlint run` against the real-run labels; write docs/accuracy.md.

    python -m bench.accuracy.score                 # run what is missing or stale, write the doc
    python -m bench.accuracy.score --table-only    # only re-render the doc from stored results
    python -m bench.accuracy.score --tool check    # one tool
    python -m bench.accuracy.score --rerun         # ignore stored results

Each tool runs on each labelled program through the real command line (`commlint.cli.main`,
the code path of the `commlint` executable), in one long-lived process per tool so that the
interpreter and torch start once; `--isolated` starts one `commlint` process per program
instead. A program is flagged when the command exits 1 (any finding). Results are stored in
bench/accuracy/results/<tool>.json, keyed by the program's and the tool's source hashes, so
a re-run only redoes what changed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RESULTS = HERE / "results"
DOC = ROOT / "docs" / "accuracy.md"
CAUSES = HERE / "causes.json"
POSITIVE = {"hang", "fail", "corrupt"}
TOOLS = ("check", "run")
# `run-fake`: the dry-run as a user runs it (fake tensors, real ones only when a value steers
# and the model is under --real-budget); scored separately, with the share of runs that
# needed any real compute (issue 11's goal: 0): a section of docs/accuracy.md of its own.
EXTRA_TOOLS = ("run-fake",)
TOOL_SOURCES = {
    # What a tool's verdict depends on: its front end, the checker, the rules.
    "check": ("commlint/lint", "commlint/rules", "commlint/commands/check.py"),
    "run": (
        "commlint/plans/dryrun",
        "commlint/graph",
        "commlint/rules",
        "commlint/trace.py",
        "commlint/commands/run.py",
    ),
}
TOOL_SOURCES["run-fake"] = TOOL_SOURCES["run"]
REAL_FALLBACK = "every rank was recorded again with small real CPU tensors"


def _sha(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def tool_hash(tool: str) -> str:
    files: list[Path] = []
    for rel in TOOL_SOURCES[tool]:
        p = ROOT / rel
        if p.is_dir():
            files += [f for f in p.rglob("*") if f.suffix in (".py", ".yaml") and f.is_file()]
        elif p.exists():
            files.append(p)
    return _sha(files)


def program_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def command(tool: str, prog: dict, out: str) -> list[str]:
    path = str((HERE / prog["path"]).relative_to(ROOT))
    if tool == "check":
        return ["check", "--no-cache", "--format", "json", "-o", out, path]
    # Every program reads tensor values (its checks, a received header): under fake tensors
    # the dry-run stops at the first value that steers and records again with real ones.
    mode = ["--tensors", "real"] if tool == "run" else []
    return [
        "run",
        "--nproc-per-node",
        str(prog["world_size"]),
        "--timeout",
        "60",
        *mode,
        "--format",
        "json",
        "-o",
        out,
        path,
    ]


def run_one(tool: str, prog: dict, isolated: bool) -> dict:
    """Run one tool on one program; the verdict, the codes, the wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        argv = command(tool, prog, out)
        stderr = io.StringIO()
        began = time.perf_counter()
        if isolated:
            proc = subprocess.run(
                [sys.executable, "-m", "commlint", *argv],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            code = proc.returncode
            stderr.write(proc.stderr)
        else:
            from commlint.cli import main as cli_main

            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = cli_main(argv)
                except SystemExit as exc:  # argparse
                    code = exc.code if isinstance(exc.code, int) else 2
        seconds = time.perf_counter() - began
        report = {}
        if os.path.exists(out):
            with contextlib.suppress(ValueError):
                report = json.loads(Path(out).read_text())
    findings = report.get("findings", [])
    return {
        "exit": code,
        "flagged": code == 1,
        "codes": sorted({f["code"] for f in findings}),
        "findings": [
            {k: f.get(k) for k in ("code", "severity", "line", "message")} for f in findings
        ][:6],
        "errors": [e.get("message") for e in report.get("errors", [])][:3]
        or ([stderr.getvalue().strip().splitlines()[-1][:300]] if code == 2 else []),
        "seconds": round(seconds, 3),
        "real_compute": argv[0] == "run"
        and ("--tensors" in argv or REAL_FALLBACK in stderr.getvalue()),
    }


def load_results(tool: str) -> dict:
    p = RESULTS / f"{tool}.json"
    return json.loads(p.read_text()) if p.exists() else {"results": {}}


def save_results(tool: str, data: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    data["results"] = dict(sorted(data["results"].items()))
    tmp = RESULTS / f"{tool}.json.tmp"
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(RESULTS / f"{tool}.json")


def score_tool(
    tool: str,
    programs: list[dict],
    rerun: bool,
    isolated: bool,
    limit: int | None,
    keep_stale: bool = False,
) -> None:
    data = load_results(tool)
    th = tool_hash(tool)
    todo = []
    for p in programs:
        key = f"{program_hash(HERE / p['path'])}:{th}"
        old = data["results"].get(p["id"])
        same_program = bool(old) and old.get("key", "").split(":")[0] == key.split(":")[0]
        if rerun or not same_program or (old.get("key") != key and not keep_stale):
            todo.append((p, key))
    if limit is not None:
        todo = todo[:limit]
    print(f"commlint {tool}: {len(todo)} of {len(programs)} programs to run", flush=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    began = time.monotonic()
    for n, (p, key) in enumerate(todo, 1):
        res = run_one(tool, p, isolated)
        res["key"] = key
        res["commit"] = head
        data["results"][p["id"]] = res
        if n % 20 == 0 or n == len(todo):
            save_results(tool, data)
            print(f"  {n}/{len(todo)} ({time.monotonic() - began:.0f}s)", flush=True)
    save_results(tool, data)


# ---------------------------------------------------------------------------------------------
# Tables


def _pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:.1f}%" if den else "—"


def confusion(rows: list[tuple[bool, bool]]) -> dict:
    tp = sum(a and f for a, f in rows)
    fn = sum(a and not f for a, f in rows)
    fp = sum(f and not a for a, f in rows)
    tn = sum(not a and not f for a, f in rows)
    return {"n": len(rows), "tp": tp, "tn": tn, "fp": fp, "fn": fn}


def table(title: str, groups: dict[str, list[tuple[bool, bool]]]) -> list[str]:
    cols = list(groups)
    stats = {c: confusion(groups[c]) for c in cols}
    out = [f"| {title} | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, key in (
        ("Total", "n"),
        ("True positive", "tp"),
        ("True negative", "tn"),
        ("False positive", "fp"),
        ("False negative", "fn"),
    ):
        out.append(f"| {name} | " + " | ".join(str(stats[c][key]) for c in cols) + " |")
    out.append(
        "| Precision | "
        + " | ".join(_pct(stats[c]["tp"], stats[c]["tp"] + stats[c]["fp"]) for c in cols)
        + " |"
    )
    out.append(
        "| Recall | "
        + " | ".join(_pct(stats[c]["tp"], stats[c]["tp"] + stats[c]["fn"]) for c in cols)
        + " |"
    )
    return out


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _fake_tensor_section(labelled: list[dict], lab: dict, res: dict) -> list[str]:
    """The dry-run as a user runs it (`commlint run` with its defaults: fake tensors, real
    ones only where a value steers and the model is under `--real-budget`), by family, with
    the runs that needed any real compute (issue 11's goal: none)."""
    scored = [p for p in labelled if p["id"] in res]
    if not scored:
        return []
    fams = sorted({p["family"] for p in scored})
    groups = {
        fam: [
            (lab[p["id"]] in POSITIVE, bool(res[p["id"]]["flagged"]))
            for p in scored
            if p["family"] == fam
        ]
        for fam in fams
    }
    groups["all"] = [row for fam in fams for row in groups[fam]]
    real = {
        fam: sum(bool(res[p["id"]].get("real_compute")) for p in scored if p["family"] == fam)
        for fam in fams
    }
    real["all"] = sum(real.values())
    out = [
        "",
        "## The dry-run as users run it: fake tensors",
        "",
        "`commlint run` with its defaults (`python -m bench.accuracy.score --tool run-fake`): "
        "fake tensors, never a computed value, real tensors only where a value steers the "
        "program and the model is under `--real-budget`. The tables below score `--tensors "
        "real`; this one the defaults. The last row counts the runs that needed any real "
        "compute (the goal: none).",
        "",
        *table("family", groups),
        "| Needed real compute | " + " | ".join(str(real[c]) for c in groups) + " |",
    ]
    return out


def render(programs: list[dict], labels: dict, results: dict[str, dict]) -> str:
    causes = json.loads(CAUSES.read_text())["rules"] if CAUSES.exists() else []
    labelled = [p for p in programs if p["id"] in labels]
    lab = {p["id"]: labels[p["id"]]["label"] for p in labelled}
    counts = Counter(lab.values())
    lines = [
        "# Accuracy: commlint against real runs",
        "",
        "<!-- generated by `python -m bench.accuracy.score`; do not edit by hand -->",
        "",
        "The benchmark of dl2 §5 (FSE 2025), rebuilt for commlint: generated distributed "
        "training programs with communication mutations, labelled by running them for real "
        "with gloo on CPU, then checked by the static linter (`commlint check`) and by the "
        "dry-run (`commlint run`).",
        "",
        "## The programs",
        "",
        f"{len(programs)} programs (`bench/accuracy/programs/`, manifest `programs.json`) from "
        "`python -m bench.accuracy.generate`: twelve families, eight written by hand with "
        "`torch.distributed` — an MLP (Megatron-style column/row tensor parallelism + data "
        "parallelism), a GPT-like block stack (TP broadcast of the batch, all-reduces in "
        "attention and MLP, sequence all-gather, bucketed DP gradients), an encoder-decoder "
        "pipeline (header + payload send/recv, a metadata exchange), a convolutional net with "
        "four parallel Inception-style branches on different groups, hierarchical collectives "
        "synthesised from p2p and plain collectives (all-reduce, all-gather, broadcast, "
        "reduce-scatter, all-to-all: dl2 Table 2), and library front ends: a DDP model, an "
        "FSDP2 (`fully_shard`) model and a DTensor tensor-parallel MLP (`parallelize_module`) "
        "— and four written with a framework: accelerate's `Accelerator` (`prepare`, "
        "`accelerator.backward`, `accelerator.gather`, DDP underneath), a LightningModule "
        'trained by Lightning\'s `Trainer(strategy="ddp")` (manual optimization: '
        "`manual_backward`, `self.all_gather`, `self.log(..., sync_dist=True)`), transformers' "
        "`Trainer` with its `training_step` overridden (the step, then "
        "`self.accelerator.gather`), and an FSDP2 loop with torchtitan's step utilities "
        "(`torchtitan.distributed.utils.clip_grad_norm_` over sharded gradients, `dist_mean`, "
        "`dist_max`) — at world size 2, 4, "
        "6, 8 (most at 2 and 4: real runs stay small). "
        "Each program has at most one mutation from the bug classes of the seed notes; some "
        "are harmless by construction (every rank still issues matching communication, often "
        "behind a rank or data condition whose arms match).",
        "",
        "| family | " + " | ".join(f"W={w}" for w in (2, 4, 6, 8)) + " | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    fams = sorted({p["family"] for p in labelled})
    for fam in fams:
        ws = Counter(p["world_size"] for p in labelled if p["family"] == fam)
        lines.append(
            f"| {fam} | "
            + " | ".join(str(ws.get(w, 0)) for w in (2, 4, 6, 8))
            + f" | {sum(ws.values())} |"
        )
    summary = ["", "## Summary", "", "| tool | programs | precision | recall | tp | tn | fp | fn |"]
    summary.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for tool in TOOLS:
        res = results.get(tool, {})
        rows = [
            (lab[p["id"]] in POSITIVE, bool(res[p["id"]]["flagged"]))
            for p in labelled
            if p["id"] in res
        ]
        if rows:
            c = confusion(rows)
            summary.append(
                f"| `commlint {tool}` | {c['n']} | {_pct(c['tp'], c['tp'] + c['fp'])} | "
                f"{_pct(c['tp'], c['tp'] + c['fn'])} | {c['tp']} | {c['tn']} | {c['fp']} | "
                f"{c['fn']} |"
            )
    lines += summary
    lines += _fake_tensor_section(labelled, lab, results.get("run-fake", {}))
    lines += [
        "",
        "## Ground truth",
        "",
        f"{len(labelled)} labelled programs: "
        + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("ok", "hang", "fail", "corrupt"))
        + ". Each ran with gloo on CPU (`python -m bench.accuracy.label`, many programs per "
        "launch, fresh groups with a short timeout per program; `bench/accuracy/runner.py`). "
        "Labels: **ok** every rank returned; **hang** a rank still waited in communication "
        "when its group's timeout expired and no rank failed on its own; **fail** a rank "
        "raised an error of its own or gloo aborted it (e.g. a size mismatch); **corrupt** "
        "every rank returned but ranks that must agree (replicas, all-reduced outputs) "
        "disagree — mismatched calls paired up silently under gloo (NCCL hangs or corrupts). "
        "Positives: hang, fail, corrupt. Labels are in `bench/accuracy/labels.json`; CI "
        "re-runs a random sample of them (`tests/accuracy/`).",
        "",
        _label_cost(labelled, labels),
        "",
        "Intended effect vs. observed label (intent is what the generator meant; the label is "
        "what happened):",
        "",
        "| intent | ok | hang | fail | corrupt |",
        "|---|---:|---:|---:|---:|",
    ]
    for intent in ("none", "harmless", "bug"):
        c = Counter(lab[p["id"]] for p in labelled if p["intent"] == intent)
        lines.append(
            f"| {intent} | "
            + " | ".join(str(c.get(k, 0)) for k in ("ok", "hang", "fail", "corrupt"))
            + " |"
        )
    lines.append("")

    for tool in TOOLS:
        res = results.get(tool, {})
        scored = [p for p in labelled if p["id"] in res]
        title = {"check": "static linter: `commlint check`", "run": "dry-run: `commlint run`"}
        lines += ["", f"## {title[tool]}", ""]
        if not scored:
            lines += ["Not scored yet: `python -m bench.accuracy.score --tool " + tool + "`.", ""]
            continue

        def row(p: dict, res=res) -> tuple[bool, bool]:
            return lab[p["id"]] in POSITIVE, bool(res[p["id"]]["flagged"])

        overall = confusion([row(p) for p in scored])
        errors = [p for p in scored if res[p["id"]]["exit"] == 2]
        lines += [
            f"{len(scored)} programs: precision "
            f"**{_pct(overall['tp'], overall['tp'] + overall['fp'])}**, recall "
            f"**{_pct(overall['tp'], overall['tp'] + overall['fn'])}** "
            f"(tp {overall['tp']}, tn {overall['tn']}, fp {overall['fp']}, fn {overall['fn']}; "
            f"{len(errors)} programs where the tool exited 2).",
            "",
            "Table 1 — by model family:",
            "",
        ]
        by_fam = defaultdict(list)
        for p in scored:
            by_fam[p["family"]].append(row(p))
        by_fam["all"] = [row(p) for p in scored]
        lines += [*table("family", dict(by_fam)), "", "Table 2 — by mutation class:", ""]
        by_cls = defaultdict(list)
        for p in sorted(scored, key=lambda p: p["mutation"]):
            by_cls[p["mutation"]].append(row(p))
        classes = sorted(by_cls)
        half = (len(classes) + 1) // 2
        lines += [*table("mutation", {c: by_cls[c] for c in classes[:half]}), ""]
        lines += [*table("mutation", {c: by_cls[c] for c in classes[half:]}), ""]
        by_hier = defaultdict(list)
        for p in scored:
            if p["family"] == "hier":
                by_hier[p["parallel"].split()[-1]].append(row(p))
        if by_hier:
            lines += ["Hierarchical collectives (dl2 Table 2's columns):", ""]
            lines += [*table("collective", dict(sorted(by_hier.items()))), ""]
        by_w = defaultdict(list)
        for p in sorted(scored, key=lambda p: p["world_size"]):
            by_w[f"W={p['world_size']}"].append(row(p))
        lines += ["By world size:", "", *table("world size", dict(by_w)), ""]
        stale = sum(res[p["id"]].get("key", "").split(":")[-1] != tool_hash(tool) for p in scored)
        if stale:
            lines += [
                f"{stale} of these results come from an earlier version of the tool's sources "
                "(`python -m bench.accuracy.score` re-runs them; `--keep-stale` keeps them).",
                "",
            ]
        secs = [res[p["id"]]["seconds"] for p in scored]
        lines += [
            "Detection time per program (wall time of `commlint "
            + (
                "check --no-cache PROG"
                if tool == "check"
                else "run --nproc-per-node W --tensors real PROG"
            )
            + "` on one program, in one long-lived process; a cold `commlint` process adds "
            "interpreter" + (" and torch" if tool == "run" else "") + " start-up): "
            f"median {statistics.median(secs):.2f} s, p90 {_q(secs, 0.9):.2f} s, "
            f"max {max(secs):.2f} s, total {sum(secs):.0f} s.",
            "",
            "| family | median s | max s |",
            "|---|---:|---:|",
        ]
        for fam in fams:
            s = [res[p["id"]]["seconds"] for p in scored if p["family"] == fam]
            if s:
                lines.append(f"| {fam} | {statistics.median(s):.2f} | {max(s):.2f} |")
        wrong = [p for p in scored if row(p)[0] != row(p)[1]]
        lines += ["", f"### Misses and false alarms of `commlint {tool}` ({len(wrong)})", ""]
        if not wrong:
            lines += ["None.", ""]
        else:
            summary = Counter(
                _cause(
                    causes,
                    tool,
                    p,
                    "false alarm" if res[p["id"]]["flagged"] else "miss",
                    res[p["id"]]["codes"],
                )
                for p in wrong
            )
            lines += ["By cause:", ""]
            for cause, n in summary.most_common():
                lines.append(f"- **{n}** × {cause}")
            lines += [""]
            lines += ["| program | label | mutation | tool said | cause |", "|---|---|---|---|---|"]
            for p in wrong:
                r = res[p["id"]]
                said = ", ".join(r["codes"]) or (
                    "error: " + (r["errors"] or ["?"])[0][:80] if r["exit"] == 2 else "nothing"
                )
                kind = "false alarm" if r["flagged"] else "miss"
                cause = _cause(causes, tool, p, kind, r["codes"])
                lines.append(
                    f"| `{p['id']}` | {lab[p['id']]} | {p['mutation']}: {p['detail']} | "
                    f"{kind}: {said} | {cause} |"
                )
            lines.append("")
    lines += [
        "## Reproduce",
        "",
        "```sh",
        "python -m bench.accuracy.generate                # programs + manifest (seeded)",
        "python -m bench.accuracy.label                   # real gloo runs → labels.json",
        "python -m bench.accuracy.score                   # both tools → results/, this page",
        "python -m bench.accuracy.score --table-only      # this page from stored results",
        "```",
        "",
    ]
    return "\n".join(lines)


def _label_cost(labelled: list[dict], labels: dict) -> str:
    secs = [labels[p["id"]]["seconds"] for p in labelled]
    if not secs:
        return ""
    by = defaultdict(list)
    for p in labelled:
        by[labels[p["id"]]["label"]].append(labels[p["id"]]["seconds"])
    parts = ", ".join(f"{k} {statistics.median(v):.1f} s" for k, v in sorted(by.items()) if v)
    return (
        f"Labelling cost: {sum(secs) / 60:.0f} min of program time for {len(secs)} programs "
        f"(median per label: {parts}; a hang costs its timeout, 3 s at W ≤ 4 and 6 s above), "
        "plus about 8-15 s of start-up per launch of W processes — a launch runs up to 40 "
        "programs, and a gloo abort ends it; DTensor, accelerate, Lightning, transformers and "
        "torchtitan programs run alone (about 10-40 s each; a hang in a framework's default "
        "group waits for that group's timeout). On the shared 2-core machine the 680 "
        "programs of the first eight families took about 80 minutes of wall time under "
        "`nice -n 10`, relabelling included, and the 40 accelerate programs another 40; the "
        "60 Lightning, transformers and torchtitan programs took about 25 minutes, two "
        "launches at a time (`--jobs 2 --timeout 10 --group-timeout 45`: a longer collective "
        "timeout, since two launches share the cores; the default group's timeout bounds a "
        "trainer's hang)."
    )


def _cause(causes: list, tool: str, p: dict, kind: str, codes: list[str]) -> str:
    """The first rule of causes.json whose every field matches this program and verdict."""
    facts = dict(p, tool=tool, kind=kind)
    for rule in causes:
        ok = True
        for field, want in rule["match"].items():
            if field == "codes":
                ok = ok and set(want) <= set(codes)
            elif field == "detail_contains":
                ok = ok and want in p["detail"]
            elif field == "ids":
                ok = ok and p["id"] in want
            elif isinstance(want, list):
                ok = ok and facts.get(field) in want
            else:
                ok = ok and facts.get(field) == want
        if ok:
            return rule["cause"]
    return "not analysed yet"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Score commlint against the real-run labels.")
    ap.add_argument(
        "--tool",
        choices=TOOLS + EXTRA_TOOLS,
        action="append",
        help="only this tool (run-fake: the dry-run without --tensors real, scored apart)",
    )
    ap.add_argument("--table-only", action="store_true", help="only re-render docs/accuracy.md")
    ap.add_argument("--rerun", action="store_true", help="ignore stored results")
    ap.add_argument(
        "--keep-stale",
        action="store_true",
        help="keep results of an older tool version; run only programs without a result",
    )
    ap.add_argument("--isolated", action="store_true", help="one commlint process per program")
    ap.add_argument("--limit", type=int, help="run at most this many programs per tool")
    ap.add_argument("--ids", nargs="*", help="only these program ids")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    programs = json.loads((HERE / "programs.json").read_text())["programs"]
    by_id = {p["id"]: p for p in programs}
    labels_path = HERE / "labels.json"
    labels = json.loads(labels_path.read_text())["labels"] if labels_path.exists() else {}
    # A label holds for the program text it was made from; a regenerated program waits
    # for `python -m bench.accuracy.label` to label it again.
    labels = {
        pid: lab
        for pid, lab in labels.items()
        if pid in by_id
        and lab.get("sha", program_hash(HERE / by_id[pid]["path"]))
        == program_hash(HERE / by_id[pid]["path"])
    }
    todo = [p for p in programs if p["id"] in labels]
    if args.ids:
        todo = [p for p in todo if p["id"] in set(args.ids)]
    tools = args.tool or list(TOOLS)
    if not args.table_only:
        for tool in tools:
            score_tool(tool, todo, args.rerun, args.isolated, args.limit, args.keep_stale)
    results = {t: load_results(t)["results"] for t in TOOLS + EXTRA_TOOLS}
    # The real-issue reproductions keep their own section (bench/accuracy/real_score.py).
    from bench.accuracy.real_score import render_section, splice

    DOC.write_text(splice(render(programs, labels, results), render_section()))
    print(f"wrote {DOC.relative_to(ROOT)}")
    for tool in TOOLS + EXTRA_TOOLS:
        rows = [
            (labels[p]["label"] in POSITIVE, r["flagged"])
            for p, r in results[tool].items()
            if p in labels
        ]
        if rows:
            c = confusion(rows)
            print(
                f"commlint {tool}: {c['n']} programs, precision "
                f"{_pct(c['tp'], c['tp'] + c['fp'])}, recall {_pct(c['tp'], c['tp'] + c['fn'])}"
                f" (tp {c['tp']} tn {c['tn']} fp {c['fp']} fn {c['fn']})"
            )
            if tool == "run-fake":
                real = [r.get("real_compute") for p, r in results[tool].items() if p in labels]
                print(
                    f"  runs that needed real compute: {sum(map(bool, real))} of {len(real)} "
                    f"({_pct(sum(map(bool, real)), len(real))}; goal 0)"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
